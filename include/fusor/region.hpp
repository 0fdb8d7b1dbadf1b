// The seven region kinds of SPEC §1 as immutable value types.
//
// Each kind has a *Spec: a plain description whose names are strings (what the region
// text and the ONNX importer produce), and a validated region built by `make`, which
// checks the spec in the documented order and returns the first failure's code.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fusor/dtype.hpp"
#include "fusor/error.hpp"
#include "fusor/ops.hpp"

namespace fusor {

enum class Layout { row_major, col_major };
std::string_view layout_name(Layout layout);
std::optional<Layout> layout_from_name(std::string_view name);

enum class RegionKind { fused, matmul, attention, gated, pointwise, pointwise_reduce, norm_chain };
// The keyword of the region text ("fused", "matmul", ...).
std::string_view region_kind_name(RegionKind kind);

// ---- 1.1 FusedRegion ------------------------------------------------------------------
struct FusedSpec {
  std::vector<std::string> prologue;
  std::vector<std::string> epilogue;
  bool residual = false;
  std::string reduction = "none";
  double eps = 1e-6;
  std::string storage = "f32";
  std::string a_layout = "row_major";
  std::string b_layout = "row_major";
  bool operator==(const FusedSpec&) const = default;
};

class FusedRegion {
public:
  static Expected<FusedRegion> make(const FusedSpec& spec);

  const std::vector<Op>& prologue() const { return prologue_; }
  const std::vector<Op>& epilogue() const { return epilogue_; }
  bool residual() const { return residual_; }
  std::optional<RowNorm> reduction() const { return reduction_; }
  double eps() const { return eps_; }
  DType storage() const { return storage_; }
  Layout a_layout() const { return a_layout_; }
  Layout b_layout() const { return b_layout_; }
  bool has_bias() const;
  FusedSpec spec() const;
  bool operator==(const FusedRegion&) const = default;

private:
  FusedRegion() = default;
  std::vector<Op> prologue_, epilogue_;
  bool residual_ = false;
  std::optional<RowNorm> reduction_;
  double eps_ = 1e-6;
  DType storage_ = DType::f32;
  Layout a_layout_ = Layout::row_major, b_layout_ = Layout::row_major;
};

// ---- 1.2 MatmulRegion -----------------------------------------------------------------
struct MatmulSpec {
  std::string storage = "f32";
  bool transpose_a = false;
  bool transpose_b = false;
  bool operator==(const MatmulSpec&) const = default;
};

class MatmulRegion {
public:
  static Expected<MatmulRegion> make(const MatmulSpec& spec);
  DType storage() const { return storage_; }
  bool transpose_a() const { return transpose_a_; }
  bool transpose_b() const { return transpose_b_; }
  MatmulSpec spec() const;
  bool operator==(const MatmulRegion&) const = default;

private:
  MatmulRegion() = default;
  DType storage_ = DType::f32;
  bool transpose_a_ = false, transpose_b_ = false;
};

// ---- 1.3 AttentionRegion --------------------------------------------------------------
struct AttentionSpec {
  double scale = 1.0;
  bool causal = false;
  bool q_transposed = false;
  bool k_transposed = false;
  std::string storage = "f32";
  bool operator==(const AttentionSpec&) const = default;
};

class AttentionRegion {
public:
  static Expected<AttentionRegion> make(const AttentionSpec& spec);
  double scale() const { return scale_; }
  bool causal() const { return causal_; }
  bool q_transposed() const { return q_transposed_; }
  bool k_transposed() const { return k_transposed_; }
  DType storage() const { return storage_; }
  AttentionSpec spec() const;
  bool operator==(const AttentionRegion&) const = default;

private:
  AttentionRegion() = default;
  double scale_ = 1.0;
  bool causal_ = false, q_transposed_ = false, k_transposed_ = false;
  DType storage_ = DType::f32;
};

// ---- 1.4 GatedMatmulRegion ------------------------------------------------------------
struct GatedSpec {
  std::string gate_act = "silu";
  std::string storage = "f32";
  bool operator==(const GatedSpec&) const = default;
};

class GatedMatmulRegion {
public:
  static Expected<GatedMatmulRegion> make(const GatedSpec& spec);
  Op gate_act() const { return gate_act_; }
  DType storage() const { return storage_; }
  GatedSpec spec() const;
  bool operator==(const GatedMatmulRegion&) const = default;

private:
  GatedMatmulRegion() = default;
  Op gate_act_ = Op::silu;
  DType storage_ = DType::f32;
};

// ---- 1.5/1.6 Pointwise DAGs -------------------------------------------------------------
// An argument of a DAG op: a value id (an input or an earlier op's result) or a constant.
using PointwiseArgSpec = std::variant<std::string, double>;

struct PointwiseOpSpec {
  std::string out;
  std::string op;
  std::vector<PointwiseArgSpec> args;
  bool operator==(const PointwiseOpSpec&) const = default;
};

struct PointwiseSpec {
  std::vector<std::string> inputs;
  std::vector<PointwiseOpSpec> ops;
  std::string output;
  bool operator==(const PointwiseSpec&) const = default;
};

// A resolved argument: external input #index, result of op #index, or a constant.
struct ValueRef {
  enum class Kind { input, node, constant };
  Kind kind = Kind::input;
  int index = 0;
  double constant = 0.0;
  bool operator==(const ValueRef&) const = default;
};

struct PointwiseNode {
  Op op;
  std::vector<ValueRef> args;
  bool operator==(const PointwiseNode&) const = default;
};

// The validated DAG shared by pointwise and pointwise_reduce regions.
class PointwiseGraph {
public:
  // `min_ops`: 2 for PointwiseGraphRegion (SPEC §1.5), 0 for PointwiseReduceRegion.
  static Expected<PointwiseGraph> make(const PointwiseSpec& spec, int min_ops, RegionKind kind);
  const std::vector<std::string>& input_names() const { return spec_.inputs; }
  const std::vector<PointwiseNode>& nodes() const { return nodes_; }
  ValueRef output() const { return output_; }
  const PointwiseSpec& spec() const { return spec_; }
  bool operator==(const PointwiseGraph&) const = default;

  static constexpr int kMaxOps = 32;
  static constexpr int kMaxInputs = 16;

private:
  PointwiseGraph() = default;
  PointwiseSpec spec_;
  std::vector<PointwiseNode> nodes_;
  ValueRef output_;
};

class PointwiseGraphRegion {
public:
  static Expected<PointwiseGraphRegion> make(const PointwiseSpec& spec);
  const PointwiseGraph& graph() const { return graph_; }
  PointwiseSpec spec() const { return graph_.spec(); }
  bool operator==(const PointwiseGraphRegion&) const = default;

private:
  explicit PointwiseGraphRegion(PointwiseGraph g) : graph_(std::move(g)) {}
  PointwiseGraph graph_;
};

struct PointwiseReduceSpec {
  PointwiseSpec graph;
  std::string reduce = "sum";
  bool operator==(const PointwiseReduceSpec&) const = default;
};

class PointwiseReduceRegion {
public:
  static Expected<PointwiseReduceRegion> make(const PointwiseReduceSpec& spec);
  const PointwiseGraph& graph() const { return graph_; }
  ReduceOp reduce() const { return reduce_; }
  PointwiseReduceSpec spec() const;
  bool operator==(const PointwiseReduceRegion&) const = default;

private:
  PointwiseReduceRegion(PointwiseGraph g, ReduceOp r) : graph_(std::move(g)), reduce_(r) {}
  PointwiseGraph graph_;
  ReduceOp reduce_;
};

// ---- 1.7 NormChainRegion --------------------------------------------------------------
struct NormChainSpec {
  std::string norm = "rmsnorm";
  bool add_residual = false;
  bool weight = false;
  bool bias = false;
  double eps = 1e-5;
  bool operator==(const NormChainSpec&) const = default;
};

class NormChainRegion {
public:
  static Expected<NormChainRegion> make(const NormChainSpec& spec);
  RowNorm norm() const { return norm_; }
  bool add_residual() const { return add_residual_; }
  bool weight() const { return weight_; }
  bool bias() const { return bias_; }
  double eps() const { return eps_; }
  NormChainSpec spec() const;
  bool operator==(const NormChainRegion&) const = default;

private:
  NormChainRegion() = default;
  RowNorm norm_ = RowNorm::rmsnorm;
  bool add_residual_ = false, weight_ = false, bias_ = false;
  double eps_ = 1e-5;
};

// ---- Any region -----------------------------------------------------------------------
using Region = std::variant<FusedRegion, MatmulRegion, AttentionRegion, GatedMatmulRegion, PointwiseGraphRegion,
                            PointwiseReduceRegion, NormChainRegion>;

RegionKind region_kind(const Region& region);

// Operand names in command-line / buffer order (SPEC operand order), e.g. {"A","B","bias"}
// for a fused region with a bias and no residual.
std::vector<std::string> operand_names(const Region& region);

// Storage dtype operands are rounded to (f32 for pointwise and norm-chain regions).
DType region_storage(const Region& region);

} // namespace fusor
