// fusor-bench: fusor's x86 lanes against the CPU peers of shared/PEERS.md, in one run, on the
// same inputs: warm-up, then the median of interleaved repetitions of each contender. GEMM-
// rooted and attention cases run the x86_amx lane and the x86_avx512 lane where the host has
// AMX, and fusor's time is the faster one's, as its arbiter picks by measurement (both are
// reported); every other case runs the x86_avx512 lane; --lane runs one lane only (cases of
// kinds it does not compute keep the base lane). A host without AVX-512 runs every case on the
// x86_avx2 lane and the portable x86_c lane, the faster one's time fusor's, as its arbiter
// would.
// fusor is timed on the kernel call alone (operands already packed into their ABI buffers);
// each peer on its equivalent calls. The oracle's error is measured on the first rows of the
// output against the double reference, and each peer's output on the same rows beside it.
// `fusor bench` execs this program.
//
//   fusor-bench SUITE [--filter TEXT] [--json] [--save FILE] [--min-ms MS] [--lane LANE] [--knob K=V]
//               [--shape MxNxK | BxHxMxNkxD[:causal] | RxC ...]
//   SUITE: gemm | gated | attention | norm | pointwise | small | all
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "codegen/abi.hpp"
#include "cross_core.hpp"
#include "fma_peak.hpp"
#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "fusor/toolchain.hpp"
#include "tile_rate.hpp"

#ifdef FUSOR_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef FUSOR_BENCH_OPENBLAS
#include <cblas.h>
#endif

namespace fusor::bench {
namespace {

using Clock = std::chrono::steady_clock;
using KernelFn = int (*)(const void* const*, float*, const std::int64_t*);
using json = nlohmann::json;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fusor-bench: %s\n", what.c_str());
  std::exit(2);
}

// --shape: "MxNxK" (a GEMM + bias + GELU case), "BxHxMxNkxD" with an optional ":causal" (an
// attention case) or "RxC" (the norm and pointwise suites' cases of R rows of C), positive integers.
struct CallerShape {
  std::vector<std::int64_t> dims;
  bool causal = false;
  bool attention() const { return dims.size() == 5; }
  bool streaming() const { return dims.size() == 2; } // norm chains and pointwise kinds
};

CallerShape parse_shape(const std::string& text) {
  CallerShape c;
  std::string rest = text;
  if (const auto colon = rest.find(':'); colon != std::string::npos) {
    if (rest.substr(colon) != ":causal")
      rest.clear();
    else
      rest.resize(colon), c.causal = true;
  }
  for (size_t at = 0; !rest.empty() && at <= rest.size();) {
    const size_t x = std::min(rest.find('x', at), rest.size());
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(rest.data() + at, rest.data() + x, v);
    if (ec != std::errc{} || end != rest.data() + x || v < 1) {
      c.dims.clear();
      break;
    }
    c.dims.push_back(v);
    at = x + 1;
  }
  if (!((c.dims.size() == 2 || c.dims.size() == 3) && !c.causal) && c.dims.size() != 5)
    die("--shape takes MxNxK (a GEMM, e.g. 24x4096x4096), BxHxMxNkxD[:causal] (attention, e.g. "
        "1x8x512x512x64:causal) or RxC (norm and pointwise, e.g. 2048x2048) with positive integers, not '" +
        text + "'");
  return c;
}

template <class T> T must(Expected<T> e, const std::string& what) {
  if (!e) die(what + ": " + e.error().str());
  return std::move(*e);
}

Region parse(const std::string& text) { return must(parse_region(text), text); }

const Target& x86() {
  const Target* t = builtin_registry().target("x86");
  if (!t) die("no x86 target");
  return *t;
}

constexpr const char* kAvx512 = "x86_avx512";
constexpr const char* kAmx = "x86_amx";
constexpr const char* kGeneric = "x86_c";
constexpr const char* kAvx2 = "x86_avx2";

// The base lane, which every case runs or is timed beside (cases on x86_amx or x86_avx2):
// x86_avx512, or on a host without AVX-512 the portable lane.
const char* base_lane() { return host_has_avx512() ? kAvx512 : kGeneric; }

// The lane's candidate for `kind` (nullptr: the lane does not compute that kind).
const Candidate* registered(const std::string& lane, RegionKind kind) {
  for (const Candidate* c : builtin_registry().candidates("x86", kind))
    if (c->name == lane) return c;
  return nullptr;
}

// The lane's candidate for `region`, or why it cannot run it here.
Expected<const Candidate*> lane_candidate(const std::string& lane, const Region& region) {
  const Candidate* c = registered(lane, region_kind(region));
  if (!c) return make_error(ErrorCode::emit_unsupported, lane + " is not registered for this kind");
  if (auto why = c->declines(region)) return make_error(ErrorCode::emit_unsupported, lane + ": " + *why);
  return c;
}

// --lane: the one lane of every case whose kind it computes (empty: none forced).
std::string& lane_choice() {
  static std::string lane;
  return lane;
}

// The lane a case runs: --lane where it computes the case's kind, else x86_amx where it runs
// (GEMM-rooted kinds and attention), else x86_avx2 on a host without AVX-512, else the base
// lane.
std::string case_lane(const Region& region) {
  const std::string& forced = lane_choice();
  if (!forced.empty()) return registered(forced, region_kind(region)) ? forced : base_lane();
  if (lane_candidate(kAmx, region)) return kAmx;
  if (!host_has_avx512() && lane_candidate(kAvx2, region)) return kAvx2;
  return base_lane();
}

// A compiled, oracle-verified kernel of the lane, ready to call on prepared buffers.
struct Kernel {
  KernelFn fn = nullptr;
  // The operands' storage bytes, on cache lines as the peers' tensors are.
  std::vector<ByteBuffer> bytes;
  std::vector<const void*> ptrs;
  std::vector<std::int64_t> dims;
  Tensor out;
  bool verified = false;
  std::string lane;
  std::vector<SharedLibrary> keep;

  int call() { return fn(ptrs.data(), out.data.data(), dims.data()); }
};

// Lane knobs (--knob mr=12 ...) for tuning runs; empty for the recorded results.
std::map<std::string, std::string>& knobs() {
  static std::map<std::string, std::string> k;
  return k;
}

// `tuned`: the --knob options apply (to the case's own kernel, not to the side contenders).
Kernel make_kernel(const Region& region, const std::vector<Tensor>& operands, const std::string& lane = base_lane(),
                   bool tuned = true) {
  const Candidate& c = *must(lane_candidate(lane, region), "lane");
  EmitOptions options;
  if (tuned) options.options = knobs();
  KernelSource src = must(emit_candidate(x86(), &c, region, options), "emit " + print_region(region));
  Artifact art = must(x86().compile(src), "compile " + print_region(region));
  Kernel k;
  k.lane = src.lane;
  const VerifyReport rep = must(ensure_verified(x86(), region, art), "verify " + print_region(region));
  if (!rep.verified) die("the oracle rejected " + print_region(region) + " on " + lane + ": " + rep.summary());
  k.verified = true;
  codegen::PreparedCall call = must(codegen::prepare_call(region, operands), "operands");
  k.bytes = std::move(call.operand_bytes);
  for (const auto& b : k.bytes) k.ptrs.push_back(b.data());
  k.dims = call.dims;
  k.out = Tensor(call.shape.output);
  SharedLibrary lib = must(SharedLibrary::load(art.path), "load");
  k.fn = reinterpret_cast<KernelFn>(must(lib.symbol(src.entry), "symbol"));
  k.keep.push_back(std::move(lib));
  return k;
}

// Interleaved timings: every repetition (round) runs each contender once, in turn. Calls
// shorter than 0.1 ms are timed in batches (the same count for every contender), so a sample
// is not mostly the clock's own cost; samples and medians are per call. The samples are kept
// by round, so a ratio can also be read round by round: two contenders timed next to each
// other share the machine's phase, which on a noisy host moves both medians.
struct Timings {
  std::vector<double> median;               // per contender
  std::vector<std::vector<double>> samples; // per contender, one per round
  std::vector<double> cross_core_ns;        // per round, measured before it (cross_core.hpp)
};

Timings time_interleaved(const std::vector<std::function<void()>>& fns, double min_ms) {
  double warm_ms = 0;
  for (int w = 0; w < 2; ++w)
    for (const auto& f : fns) {
      const auto t0 = Clock::now();
      f();
      warm_ms = std::max(warm_ms, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  const int batch = warm_ms >= 0.1 ? 1 : static_cast<int>(std::min(1000.0, std::ceil(0.1 / std::max(warm_ms, 1e-4))));
  Timings t;
  t.samples.resize(fns.size());
  const auto start = Clock::now();
  for (int rep = 0; rep < 200; ++rep) {
    t.cross_core_ns.push_back(cross_core_round_trip_ns());
    for (size_t i = 0; i < fns.size(); ++i) {
      const auto t0 = Clock::now();
      for (int b = 0; b < batch; ++b) fns[i]();
      t.samples[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / batch);
    }
    const double spent = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (rep >= 6 && spent > min_ms) break;
  }
  for (auto v : t.samples) {
    std::sort(v.begin(), v.end());
    t.median.push_back(v[v.size() / 2]);
  }
  return t;
}

// Rounds whose threads sat far apart: a cache line's round trip over 150 ns, which crosses
// between core complexes or sockets (the development VM reads ~60 ns within one, ~290 ns
// between two; a whole case can run in either, so no bound relative to the case holds).
// Empty where it was not measured.
std::vector<bool> far_rounds(const std::vector<double>& cross_core_ns) {
  constexpr double kFarNs = 150;
  std::vector<bool> far;
  if (cross_core_ns.empty() || !std::isfinite(cross_core_ns.front())) return far;
  for (double ns : cross_core_ns) far.push_back(ns > kFarNs);
  return far;
}

// The median of a peer's time over fusor's over the rounds whose placement is `far` (NaN
// with fewer than three such rounds).
double ratio_by_placement(const std::vector<double>& peer, const std::vector<double>& fusor,
                          const std::vector<bool>& far, bool want_far) {
  std::vector<double> ratios;
  for (size_t i = 0; i < peer.size() && i < fusor.size() && i < far.size(); ++i)
    if (far[i] == want_far) ratios.push_back(peer[i] / fusor[i]);
  if (ratios.size() < 3) return NAN;
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() / 2];
}

// The quartiles of a peer's time over fusor's, round by round (> 1: fusor is faster).
std::pair<double, double> round_ratio_quartiles(const std::vector<double>& peer, const std::vector<double>& fusor) {
  std::vector<double> ratios;
  for (size_t i = 0; i < peer.size() && i < fusor.size(); ++i) ratios.push_back(peer[i] / fusor[i]);
  if (ratios.empty()) return {NAN, NAN};
  std::sort(ratios.begin(), ratios.end());
  return {ratios[ratios.size() / 4], ratios[3 * ratios.size() / 4]};
}

double max_abs_err(const float* got, const Tensor& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref.data[i]);
    if (std::isnan(d)) return INFINITY;
    e = std::max(e, d);
  }
  return e;
}

// First `rows` rows of a row-major [rows_total, ...] tensor.
Tensor leading_rows(const Tensor& t, std::int64_t rows) {
  Shape s = t.shape;
  const std::int64_t per = t.numel() / s[0];
  s[0] = rows;
  return Tensor(s, std::vector<float>(t.data.begin(), t.data.begin() + rows * per));
}

struct Result {
  std::string name, shape, lane;
  std::map<std::string, double> lane_ms; // when two lanes ran: each one's time
  double fusor_ms = 0;
  std::map<std::string, double> peer_ms;
  std::vector<double> fusor_rounds;                       // fusor's time in each round
  std::map<std::string, std::vector<double>> peer_rounds; // each peer's, the same rounds
  std::vector<double> cross_core_ns;                      // the threads' placement, each round
  double work = 0;                                        // FLOPs or bytes
  bool bandwidth = false;
  double copy_bytes = 0; // what the copy peer reads and writes
  double err = 0;
  std::string err_note;
  Tensor ref;                             // the reference over the rows err is measured on
  std::map<std::string, double> peer_err; // each peer's output against the same reference
  bool verified = false;
  std::string peer_note;
};

// The oracle's error on the bench inputs, over the output's first `rows` rows: the operands
// listed in `row_operands` are cut to their first rows (rows are independent; the double
// reference of a 2048^3 GEMM in full would take seconds).
void measure_error(Result& r, const Region& region, const std::vector<Tensor>& operands,
                   const std::vector<size_t>& row_operands, std::int64_t rows, const Kernel& k) {
  std::vector<Tensor> sub = operands;
  for (size_t i : row_operands) sub[i] = leading_rows(operands[i], rows);
  r.ref = must(evaluate_reference(region, sub), "reference");
  r.err = max_abs_err(k.out.data.data(), r.ref);
  r.err_note = "first " + std::to_string(rows) + " rows";
}

// A peer's error on the same rows (its output row-major like fusor's), so the accuracy a
// speed-up comes with is read against the peer's, not only against the budget.
void measure_peer_error(Result& r, const std::string& peer, const float* out) {
  r.peer_err[peer] = max_abs_err(out, r.ref);
}

struct Options {
  std::string suite, filter, save;
  bool json_lines = false;
  double min_ms = 1500;
  // --shape: GEMM + bias + GELU, attention, norm and pointwise cases of these shapes in place
  // of the suite's listed ones.
  std::vector<CallerShape> shapes;
};

#ifdef FUSOR_BENCH_ONEDNN
dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
dnnl::memory mem(const dnnl::memory::dims& d, tag t, const void* p) {
  return dnnl::memory({d, dt::f32, t}, engine(), const_cast<void*>(p));
}
#endif

// The epilogue pass of the "BLAS + separate epilogue" peers: a pointwise kernel of fusor's
// own lane (same op table, same vector math) over the GEMM's output.
struct EpiloguePass {
  Kernel k;
  std::vector<float>* c = nullptr;
  void run() {
    k.ptrs[0] = c->data();
    k.call();
  }
};

// fusor's time from the medians (contender 0 its kernel's, then one per name): with two
// lanes timed, the faster one's, as the arbiter picks by measurement, each lane's kept in
// lane_ms. The rounds' samples of fusor's pick and of each peer are kept for the spread.
void record_times(Result& r, const Timings& t, const std::vector<std::string>& names) {
  r.fusor_ms = t.median[0];
  r.fusor_rounds = t.samples[0];
  r.cross_core_ns = t.cross_core_ns;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] != base_lane()) {
      r.peer_ms[names[i]] = t.median[i + 1];
      r.peer_rounds[names[i]] = t.samples[i + 1];
      continue;
    }
    r.lane_ms[r.lane] = t.median[0];
    r.lane_ms[base_lane()] = t.median[i + 1];
    if (t.median[i + 1] < r.fusor_ms) {
      r.fusor_ms = t.median[i + 1];
      r.fusor_rounds = t.samples[i + 1];
      r.err_note += " (of the " + r.lane + " kernel; both lanes passed the oracle)";
      r.lane = base_lane();
    }
  }
}

// Cases on the x86_amx (or x86_avx2) lane also time the base lane (record_times picks the
// faster), unless --lane asked for one lane.
void also_base_lane(const Region& region, const std::vector<Tensor>& operands, const Kernel& k,
                    std::optional<Kernel>& k2, std::vector<std::function<void()>>& fns,
                    std::vector<std::string>& names) {
  if (k.lane == base_lane() || !lane_choice().empty()) return;
  k2 = make_kernel(region, operands, base_lane(), false);
  fns.push_back([&k2] { k2->call(); });
  names.push_back(base_lane());
}

// ---- GEMM + bias + epilogue ----------------------------------------------------------
Result bench_fused(const std::string& name, std::int64_t M, std::int64_t N, std::int64_t K, bool residual,
                   const Options& opt) {
  const std::string text =
      residual ? "fused { epilogue = [bias]; residual = true }" : "fused { epilogue = [bias, gelu] }";
  const Region region = parse(text);
  ProblemShape dims;
  dims.M = M, dims.N = N, dims.K = K;
  const auto operands = make_operands(region, dims, 7, 0.5);
  Kernel k = make_kernel(region, operands, case_lane(region));
  Result r;
  r.name = name;
  r.shape = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
  r.work = 2.0 * M * N * K;
  r.verified = k.verified;
  r.lane = k.lane;
  k.call();
  measure_error(r, region, operands, residual ? std::vector<size_t>{0, 3} : std::vector<size_t>{0},
                std::min<std::int64_t>(M, 64), k);

  std::vector<std::function<void()>> fns{[&] { k.call(); }};
  std::vector<std::string> names;
  std::optional<Kernel> k2;
  also_base_lane(region, operands, k, k2, fns, names);
  const float* A = operands[0].data.data();
  const float* B = operands[1].data.data();
#ifdef FUSOR_BENCH_ONEDNN
  const float* bias = operands[2].data.data();
  const float* res = residual ? operands[3].data.data() : nullptr;
  std::vector<float> c1(static_cast<size_t>(M * N));
  using namespace dnnl;
  post_ops po;
  if (residual)
    po.append_binary(algorithm::binary_add, {{M, N}, dt::f32, tag::ab});
  else
    po.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(po);
  matmul::primitive_desc pd(matmul::desc({{M, K}, dt::f32, tag::ab}, {{K, N}, dt::f32, tag::ab},
                                         {{1, N}, dt::f32, tag::ab}, {{M, N}, dt::f32, tag::ab}),
                            attr, engine());
  matmul mm(pd);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem({M, K}, tag::ab, A)},
                                       {DNNL_ARG_WEIGHTS, mem({K, N}, tag::ab, B)},
                                       {DNNL_ARG_BIAS, mem({1, N}, tag::ab, bias)},
                                       {DNNL_ARG_DST, mem({M, N}, tag::ab, c1.data())}};
  if (residual) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mem({M, N}, tag::ab, res));
  r.peer_note += std::string("onednn impl: ") + pd.impl_info_str() + "; ";
  fns.push_back([&] {
    mm.execute(stream(), args);
    stream().wait();
  });
  names.push_back("onednn");
#endif
#ifdef FUSOR_BENCH_OPENBLAS
  std::vector<float> c2(static_cast<size_t>(M * N));
  const std::string epi_text = residual
                                   ? "pointwise { inputs = [c, b, r]; t0 = add(c, b); t1 = add(t0, r); output = t1 }"
                                   : "pointwise { inputs = [c, b]; t0 = add(c, b); t1 = gelu(t0); output = t1 }";
  const Region epi = parse(epi_text);
  std::vector<Tensor> epi_ops{Tensor({M, N}), Tensor({N}, operands[2].data)};
  if (residual) epi_ops.push_back(operands[3]);
  EpiloguePass pass{make_kernel(epi, epi_ops, base_lane(), false), &c2};
  fns.push_back([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), 1.0f, A, static_cast<int>(K), B, static_cast<int>(N), 0.0f, c2.data(),
                static_cast<int>(N));
    pass.run();
  });
  names.push_back("openblas");
#endif
  record_times(r, time_interleaved(fns, opt.min_ms), names);
#ifdef FUSOR_BENCH_ONEDNN
  measure_peer_error(r, "onednn", c1.data());
#endif
#ifdef FUSOR_BENCH_OPENBLAS
  measure_peer_error(r, "openblas", pass.k.out.data.data());
#endif
  return r;
}

// ---- gated (SwiGLU) -------------------------------------------------------------------
Result bench_gated(std::int64_t M, std::int64_t K, std::int64_t H, const Options& opt) {
  const Region region = parse("gated { gate_act = silu }");
  ProblemShape dims;
  dims.M = M, dims.N = H, dims.K = K;
  const auto operands = make_operands(region, dims, 9, 0.5);
  Kernel k = make_kernel(region, operands, case_lane(region));
  Result r;
  r.name = "gated_silu_" + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(H);
  r.shape = std::to_string(M) + "x" + std::to_string(K) + "->" + std::to_string(H);
  r.work = 4.0 * M * H * K;
  r.verified = k.verified;
  r.lane = k.lane;
  k.call();
  measure_error(r, region, operands, {0}, std::min<std::int64_t>(M, 64), k);
  std::vector<std::function<void()>> fns{[&] { k.call(); }};
  std::vector<std::string> names;
  std::optional<Kernel> k2;
  also_base_lane(region, operands, k, k2, fns, names);
  const float* A = operands[0].data.data();
  const float* Wg = operands[1].data.data();
  const float* Wu = operands[2].data.data();
#ifdef FUSOR_BENCH_ONEDNN
  // oneDNN's best two-matmul composition: g = swish(A Wg) as a post-op, then
  // out = (A Wu) * g as a binary post-op of the second matmul.
  using namespace dnnl;
  std::vector<float> g(static_cast<size_t>(M * H)), o(static_cast<size_t>(M * H));
  post_ops p1, p2;
  p1.append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f);
  p2.append_binary(algorithm::binary_mul, {{M, H}, dt::f32, tag::ab});
  primitive_attr a1, a2;
  a1.set_post_ops(p1);
  a2.set_post_ops(p2);
  const memory::desc src{{M, K}, dt::f32, tag::ab}, wei{{K, H}, dt::f32, tag::ab}, dst{{M, H}, dt::f32, tag::ab};
  matmul::primitive_desc pd1(matmul::desc(src, wei, dst), a1, engine()), pd2(matmul::desc(src, wei, dst), a2, engine());
  matmul m1(pd1), m2(pd2);
  std::unordered_map<int, memory> args1{{DNNL_ARG_SRC, mem({M, K}, tag::ab, A)},
                                        {DNNL_ARG_WEIGHTS, mem({K, H}, tag::ab, Wg)},
                                        {DNNL_ARG_DST, mem({M, H}, tag::ab, g.data())}};
  std::unordered_map<int, memory> args2{
      {DNNL_ARG_SRC, mem({M, K}, tag::ab, A)},
      {DNNL_ARG_WEIGHTS, mem({K, H}, tag::ab, Wu)},
      {DNNL_ARG_DST, mem({M, H}, tag::ab, o.data())},
      {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mem({M, H}, tag::ab, g.data())}};
  r.peer_note += std::string("onednn impl: ") + pd1.impl_info_str() + "; ";
  fns.push_back([&] {
    m1.execute(stream(), args1);
    m2.execute(stream(), args2);
    stream().wait();
  });
  names.push_back("onednn");
#endif
#ifdef FUSOR_BENCH_OPENBLAS
  std::vector<float> gb(static_cast<size_t>(M * H)), ub(static_cast<size_t>(M * H));
  const Region epi = parse("pointwise { inputs = [g, u]; t0 = silu(g); t1 = mul(t0, u); output = t1 }");
  Kernel ek = make_kernel(epi, std::vector<Tensor>{Tensor({M, H}), Tensor({M, H})}, base_lane(), false);
  ek.ptrs[0] = gb.data();
  ek.ptrs[1] = ub.data();
  fns.push_back([&] {
    const int m = static_cast<int>(M), h = static_cast<int>(H), kk = static_cast<int>(K);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, h, kk, 1.0f, A, kk, Wg, h, 0.0f, gb.data(), h);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, h, kk, 1.0f, A, kk, Wu, h, 0.0f, ub.data(), h);
    ek.call();
  });
  names.push_back("openblas");
#endif
  record_times(r, time_interleaved(fns, opt.min_ms), names);
#ifdef FUSOR_BENCH_ONEDNN
  measure_peer_error(r, "onednn", o.data());
#endif
#ifdef FUSOR_BENCH_OPENBLAS
  measure_peer_error(r, "openblas", ek.out.data.data());
#endif
  return r;
}

// ---- attention -------------------------------------------------------------------------
// B x H heads of M queries against Nk keys; the square cases are B = 2, H = 4, M = Nk = S.
struct AttentionCase {
  std::int64_t B = 2, H = 4, M = 0, Nk = 0, D = 0;
  bool causal = false;
  std::string name;
  bool k_transposed = false; // K stored [D][Nk] per head (a transposed KV cache)
};

Result bench_attention(const AttentionCase& ac, const Options& opt) {
  const std::int64_t B = ac.B, H = ac.H, M = ac.M, Nk = ac.Nk, D = ac.D;
  const bool causal = ac.causal;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const Region region =
      parse("attention { scale = " + std::to_string(scale) + "; causal = " + (causal ? "true" : "false") +
            "; k_transposed = " + (ac.k_transposed ? "true" : "false") + " }");
  ProblemShape dims;
  dims.batch = B, dims.heads = H, dims.kv_heads = H, dims.M = M, dims.Nk = Nk, dims.D = D, dims.Dv = D;
  const auto operands = make_operands(region, dims, 11, 1.0);
  Kernel k = make_kernel(region, operands, case_lane(region));
  Result r;
  r.name = ac.name;
  r.shape = "B=" + std::to_string(B) + " H=" + std::to_string(H) +
            (M == Nk ? " S=" + std::to_string(M) : " M=" + std::to_string(M) + " Nk=" + std::to_string(Nk)) +
            " D=" + std::to_string(D);
  r.work = 4.0 * B * H * M * Nk * D * (causal ? 0.5 : 1.0);
  r.verified = k.verified;
  r.lane = k.lane;
  k.call();
  // Reference on the first 32 queries of every head (queries are independent).
  const std::int64_t q = std::min<std::int64_t>(32, M);
  Shape qshape = operands[0].shape; // [B, H, M, D], or [H, M, D] with one batch
  qshape[qshape.size() - 2] = q;
  Tensor qs(qshape);
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    std::copy_n(operands[0].data.begin() + bh * M * D, q * D, qs.data.begin() + bh * q * D);
  const Tensor ref = must(evaluate_reference(region, std::vector<Tensor>{qs, operands[1], operands[2]}), "reference");
  const auto error_of = [&](const float* out) {
    double e = 0;
    for (std::int64_t bh = 0; bh < B * H; ++bh)
      for (std::int64_t i = 0; i < q * D; ++i) {
        const double d = std::fabs(out[bh * M * D + i] - ref.data[bh * q * D + i]);
        e = std::isnan(d) ? INFINITY : std::max(e, d);
      }
    return e;
  };
  r.err = error_of(k.out.data.data());
  r.err_note = M > q ? "first 32 queries of each head" : "every query";
  std::vector<std::function<void()>> fns{[&] { k.call(); }};
  std::vector<std::string> names;
  std::optional<Kernel> k2;
  also_base_lane(region, operands, k, k2, fns, names);
#ifdef FUSOR_BENCH_ONEDNN
  // Unfused: scores = scale * Q K^T (+ causal mask) -> softmax primitive -> P V.
  using namespace dnnl;
  const std::int64_t BH = B * H;
  std::vector<float> scores(static_cast<size_t>(BH * M * Nk)), probs(scores.size()), o(static_cast<size_t>(BH * M * D));
  // A full-size mask: oneDNN 2.6 runs a broadcast ({1,S,S}) binary post-op on its slow
  // reference path, which would flatter fusor; an unbroadcast one keeps brgemm.
  std::vector<float> mask(causal ? static_cast<size_t>(BH * M * Nk) : 0, 0.0f);
  for (std::int64_t h = 0; causal && h < BH; ++h)
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = i + 1; j < Nk; ++j) mask[(h * M + i) * Nk + j] = -INFINITY;
  post_ops po;
  po.append_eltwise(1.f, algorithm::eltwise_linear, scale, 0.f);
  if (causal) po.append_binary(algorithm::binary_add, {{BH, M, Nk}, dt::f32, tag::abc});
  primitive_attr attr;
  attr.set_post_ops(po);
  const memory::desc q_md{{BH, M, D}, dt::f32, tag::abc},
      kt_md{{BH, D, Nk}, dt::f32, ac.k_transposed ? tag::abc : tag::acb}, s_md{{BH, M, Nk}, dt::f32, tag::abc},
      v_md{{BH, Nk, D}, dt::f32, tag::abc};
  matmul::primitive_desc pd1(matmul::desc(q_md, kt_md, s_md), attr, engine());
  matmul qk(pd1);
  softmax_forward::primitive_desc spd(softmax_forward::desc(prop_kind::forward_inference, s_md, 2), engine());
  softmax_forward sm(spd);
  matmul::primitive_desc pd2(matmul::desc(s_md, v_md, q_md), engine());
  matmul pv(pd2);
  std::unordered_map<int, memory> a1{
      {DNNL_ARG_SRC, memory(q_md, engine(), const_cast<float*>(operands[0].data.data()))},
      {DNNL_ARG_WEIGHTS, memory(kt_md, engine(), const_cast<float*>(operands[1].data.data()))},
      {DNNL_ARG_DST, memory(s_md, engine(), scores.data())}};
  if (causal) a1.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, mem({BH, M, Nk}, tag::abc, mask.data()));
  std::unordered_map<int, memory> a2{{DNNL_ARG_SRC, memory(s_md, engine(), scores.data())},
                                     {DNNL_ARG_DST, memory(s_md, engine(), probs.data())}};
  std::unordered_map<int, memory> a3{
      {DNNL_ARG_SRC, memory(s_md, engine(), probs.data())},
      {DNNL_ARG_WEIGHTS, memory(v_md, engine(), const_cast<float*>(operands[2].data.data()))},
      {DNNL_ARG_DST, memory(q_md, engine(), o.data())}};
  r.peer_note += std::string("onednn impls: ") + pd1.impl_info_str() + ", " + spd.impl_info_str() + "; ";
  fns.push_back([&] {
    qk.execute(stream(), a1);
    sm.execute(stream(), a2);
    pv.execute(stream(), a3);
    stream().wait();
  });
  names.push_back("onednn");
#endif
  record_times(r, time_interleaved(fns, opt.min_ms), names);
#ifdef FUSOR_BENCH_ONEDNN
  r.peer_err["onednn"] = error_of(o.data());
#endif
  return r;
}

// ---- streaming kinds (norm chains, pointwise DAGs, pointwise reductions) vs a STREAM copy --
// `bytes`: what the kernel must read and write at least. The peer is a STREAM-style copy of
// one array the size of the first operand, the bandwidth roofline's measure.
Result bench_streaming(const std::string& name, const Region& region, const ProblemShape& dims, double bytes,
                       std::uint64_t seed, const Options& opt) {
  const auto operands = make_operands(region, dims, seed, 1.0);
  Kernel k = make_kernel(region, operands, case_lane(region));
  Result r;
  r.name = name;
  r.shape = std::to_string(dims.output[0]) + "x" + std::to_string(dims.output[1]);
  r.bandwidth = true;
  r.work = bytes;
  r.verified = k.verified;
  r.lane = k.lane;
  k.call();
  std::vector<size_t> row_operands; // operands with rows; per-feature vectors stay whole
  for (size_t i = 0; i < operands.size(); ++i)
    if (operands[i].shape.size() == 2) row_operands.push_back(i);
  measure_error(r, region, operands, row_operands, std::min<std::int64_t>(dims.output[0], 64), k);
  FloatBuffer src(operands[0].data), dst(src.size()); // both on cache lines, like the kernel's
  const auto total = static_cast<std::int64_t>(src.size());
  std::vector<std::function<void()>> fns{[&] { k.call(); },
                                         [&] {
                                           float* __restrict d = dst.data();
                                           const float* __restrict s = src.data();
#pragma omp parallel for simd schedule(static)
                                           for (std::int64_t i = 0; i < total; ++i) d[i] = s[i];
                                         }};
  std::vector<std::string> names{"copy"};
  std::optional<Kernel> k2;
  also_base_lane(region, operands, k, k2, fns, names);
  record_times(r, time_interleaved(fns, opt.min_ms), names);
  r.copy_bytes = 8.0 * static_cast<double>(total);
  r.peer_note = "copy moves " + std::to_string(r.copy_bytes / 1e6) + " MB";
  return r;
}

Result bench_norm(const std::string& norm, std::int64_t rows, std::int64_t len, const Options& opt) {
  const bool rms = norm == "rmsnorm";
  const Region region =
      parse(std::string("norm_chain { norm = ") + norm + "; add_residual = " + (rms ? "true" : "false") +
            "; weight = true; bias = " + (rms ? "false" : "true") + " }");
  ProblemShape dims;
  dims.rows = rows, dims.row_len = len, dims.output = {rows, len};
  const double n = static_cast<double>(rows * len);
  const double bytes = 4.0 * (n * (rms ? 3 : 2) + len * (rms ? 1 : 2)); // rows read and written, per-feature vectors
  return bench_streaming(norm + (rms ? "_residual_weight_" : "_weight_bias_") + std::to_string(rows) + "x" +
                             std::to_string(len),
                         region, dims, bytes, 13, opt);
}

// The examples' pointwise DAG (two inputs, sigmoid, tanh) and row sum of squares.
Result bench_pointwise(bool reduce, std::int64_t rows, std::int64_t len, const Options& opt) {
  const Region region = parse(reduce ? "pointwise_reduce { inputs = [x]; sq = mul(x, x); output = sq; reduce = sum }"
                                     : "pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); "
                                       "h = mul(x, 0.5); out = add(t, h); output = out }");
  ProblemShape dims;
  dims.output = {rows, len};
  dims.rows = rows, dims.row_len = len;
  const double n = static_cast<double>(rows * len);
  const double bytes = reduce ? 4.0 * (n + rows) : 4.0 * 3 * n; // inputs read, output written
  return bench_streaming(std::string(reduce ? "pointwise_reduce_sumsq_" : "pointwise_swish_gate_") +
                             std::to_string(rows) + "x" + std::to_string(len),
                         region, dims, bytes, 15, opt);
}

json to_json(const Result& r, std::optional<double> peak) {
  json j;
  j["case"] = r.name;
  j["shape"] = r.shape;
  if (!r.lane.empty()) j["lane"] = r.lane;
  // A tuning run's case says so, so that it is never read as the defaults' (fusor-results skips it).
  if (!knobs().empty()) j["knobs"] = knobs();
  for (const auto& [lane, ms] : r.lane_ms) j[lane + "_ms"] = ms;
  j["fusor_ms"] = r.fusor_ms;
  for (const auto& [peer, ms] : r.peer_ms) {
    j[peer + "_ms"] = ms;
    j[peer + "_ratio"] = ms / r.fusor_ms; // > 1: fusor is faster
    if (const auto it = r.peer_rounds.find(peer);
        it != r.peer_rounds.end() && !it->second.empty() && !r.fusor_rounds.empty()) {
      const auto [q1, q3] = round_ratio_quartiles(it->second, r.fusor_rounds);
      j[peer + "_ratio_q1"] = q1;
      j[peer + "_ratio_q3"] = q3;
    }
  }
  if (!r.fusor_rounds.empty()) j["rounds"] = r.fusor_rounds.size();
  // The threads' placement over the rounds, and each peer's ratio within each placement.
  if (const auto far = far_rounds(r.cross_core_ns); !far.empty()) {
    std::vector<double> ns = r.cross_core_ns;
    std::sort(ns.begin(), ns.end());
    j["cross_core_ns"] = ns[ns.size() / 2];
    j["far_rounds"] = std::count(far.begin(), far.end(), true);
    for (const auto& [peer, rounds] : r.peer_rounds)
      for (const bool want_far : {false, true})
        if (const double ratio = ratio_by_placement(rounds, r.fusor_rounds, far, want_far); std::isfinite(ratio))
          j[peer + (want_far ? "_ratio_far" : "_ratio_near")] = ratio;
  }
  if (r.bandwidth) {
    j["gbps"] = r.work / r.fusor_ms / 1e6;
    if (r.peer_ms.count("copy")) {
      j["copy_gbps"] = r.copy_bytes / r.peer_ms.at("copy") / 1e6;
      j["fraction_of_copy_bw"] = j["gbps"].get<double>() / j["copy_gbps"].get<double>();
    }
  } else {
    j["gflops"] = r.work / r.fusor_ms / 1e6;
    for (const auto& [peer, ms] : r.peer_ms) j[peer + "_gflops"] = r.work / ms / 1e6;
    if (peak) {
      j["fma_peak_gflops"] = *peak;
      j["fraction_of_peak"] = j["gflops"].get<double>() / *peak;
      for (const auto& [peer, ms] : r.peer_ms) j[peer + "_ratio_at_peak"] = ms / (r.work / *peak / 1e6);
    }
  }
  j["max_abs_err"] = r.err;
  for (const auto& [peer, e] : r.peer_err) j[peer + "_max_abs_err"] = e;
  j["err_on"] = r.err_note;
  j["verified"] = r.verified;
  if (!r.peer_note.empty()) j["note"] = r.peer_note;
  return j;
}

void print_human(const json& j) {
  std::printf("%-36s fusor %9.3f ms", j["case"].get<std::string>().c_str(), j["fusor_ms"].get<double>());
  if (j.contains("lane")) std::printf(" [%s]", j["lane"].get<std::string>().c_str());
  if (j.contains("gflops")) std::printf(" %7.1f GFLOP/s", j["gflops"].get<double>());
  if (j.contains("fraction_of_peak")) std::printf(" (%.2f of peak)", j["fraction_of_peak"].get<double>());
  if (j.contains("gbps")) std::printf(" %7.1f GB/s", j["gbps"].get<double>());
  for (const char* peer : {"onednn", "openblas", "copy"}) {
    const std::string key = std::string(peer) + "_ms";
    if (!j.contains(key)) continue;
    std::printf(" | %s %9.3f ms (x%.2f", peer, j[key].get<double>(), j[std::string(peer) + "_ratio"].get<double>());
    const std::string q1 = std::string(peer) + "_ratio_q1", q3 = std::string(peer) + "_ratio_q3";
    if (j.contains(q1)) std::printf(", rounds %.2f-%.2f", j[q1].get<double>(), j[q3].get<double>());
    const std::string at_peak = std::string(peer) + "_ratio_at_peak";
    if (j.contains(at_peak)) std::printf("; x%.2f at peak", j[at_peak].get<double>());
    std::printf(")");
  }
  const char* lanes = " | lanes";
  for (const auto& [key, value] : j.items())
    if (key.rfind("x86_", 0) == 0 && key.size() > 3 && key.substr(key.size() - 3) == "_ms") {
      std::printf("%s %s %.3f ms", lanes, key.substr(0, key.size() - 3).c_str(), value.get<double>());
      lanes = ",";
    }
  if (j.contains("fraction_of_copy_bw"))
    std::printf(" | %.2f of copy bandwidth", j["fraction_of_copy_bw"].get<double>());
  if (j.contains("cross_core_ns")) {
    std::printf(" | cores %.0f ns", j["cross_core_ns"].get<double>());
    if (const auto far = j["far_rounds"].get<long>(); far > 0)
      std::printf(", far %ld of %ld rounds", far, j["rounds"].get<long>());
  }
  std::printf(" | err %.2g", j["max_abs_err"].get<double>());
  const char* sep = " (";
  for (const char* peer : {"onednn", "openblas"}) {
    const std::string key = std::string(peer) + "_max_abs_err";
    if (!j.contains(key)) continue;
    std::printf("%s%s %.2g", sep, peer, j[key].get<double>());
    sep = ", ";
  }
  if (std::strcmp(sep, ", ") == 0) std::printf(")");
  std::printf("%s\n", j["verified"].get<bool>() ? "" : " UNVERIFIED");
  std::fflush(stdout);
}

std::string today() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&t));
  return buf;
}

json machine(std::optional<double> peak, const std::optional<TileRate>& tiles) {
  json m;
  if (peak) m["fma_peak_gflops"] = *peak;
  if (tiles) m["amx_tile_ns_per_product"] = tiles->ns_per_product, m["amx_bf16_peak_gflops"] = tiles->gflops;
  m["date"] = today();
  m["isa"] = host_isa();
  if (!knobs().empty()) m["knobs"] = knobs();
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);)
    if (line.rfind("model name", 0) == 0) {
      m["cpu_model"] = line.substr(line.find(':') + 2);
      break;
    }
#ifdef _OPENMP
  m["threads"] = omp_get_max_threads();
#endif
#ifdef FUSOR_BENCH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  m["onednn"] = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
#endif
#ifdef FUSOR_BENCH_OPENBLAS
  m["openblas"] = openblas_get_config();
  m["openblas_corename"] = openblas_get_corename();
#endif
  for (const char* var : {"OPENBLAS_CORETYPE", "OPENBLAS_THREAD_TIMEOUT"}) {
    const char* set = std::getenv(var);
    m[var] = set ? set : "(unset)";
  }
  m["timing"] = "warm-up 2 calls each, then the median of interleaved repetitions (>= 7, ~1.5 s per case; calls under "
                "0.1 ms timed in batches, the time per call); each peer's ratio also as the quartiles of the rounds' "
                "ratios (<peer>_ratio_q1 / _q3); before each round a cache line's round trip between threads 0 and 1 "
                "(cross_core_ns, the median): rounds over 150 ns are far (far_rounds), and each "
                "peer's median ratio within near and far rounds (<peer>_ratio_near / _far, three rounds or more); "
                "fraction_of_peak and <peer>_ratio_at_peak against the case's fma_peak_gflops, the higher of the FMA "
                "peak's readings just before and just after it (fma_peak_readings; the machine's fma_peak_gflops: the "
                "run's first)";
  return m;
}

int run(const Options& opt) {
  struct Entry {
    std::string suite, name;
    std::function<Result()> fn;
  };
  std::vector<Entry> entries;
  for (auto [m, n, k] : std::vector<std::array<std::int64_t, 3>>{
           {512, 2048, 768}, {1024, 1024, 1024}, {2048, 2048, 2048}, {128, 3072, 768}}) {
    const std::string nm = "gemm_bias_gelu_" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    entries.push_back({"gemm", nm, [=, &opt] { return bench_fused(nm, m, n, k, false, opt); }});
  }
  for (auto [m, n, k] : std::vector<std::array<std::int64_t, 3>>{{512, 2048, 768}, {1024, 1024, 1024}}) {
    const std::string nm =
        "gemm_bias_residual_" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    entries.push_back({"gemm", nm, [=, &opt] { return bench_fused(nm, m, n, k, true, opt); }});
  }
  // Small shapes, where a kernel's fixed costs (threads, packing, edges) show: the embedded
  // transformer block's GEMMs (64 tokens, width 64, MLP 256), one BERT-base sequence, and a
  // decoder's 1, 4, 8, 16 and 32 tokens through a 4096 x 4096 weight (B's trip from memory).
  for (auto [m, n, k, res] :
       std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>>{{64, 256, 64, false},
                                                                               {64, 64, 256, true},
                                                                               {64, 64, 64, true},
                                                                               {128, 768, 3072, true},
                                                                               {1, 4096, 4096, false},
                                                                               {4, 4096, 4096, false},
                                                                               {8, 4096, 4096, false},
                                                                               {16, 4096, 4096, false},
                                                                               {32, 4096, 4096, false}}) {
    const std::string nm = std::string(res ? "gemm_bias_residual_" : "gemm_bias_gelu_") + std::to_string(m) + "x" +
                           std::to_string(n) + "x" + std::to_string(k);
    entries.push_back({"small", nm, [=, &opt] { return bench_fused(nm, m, n, k, res, opt); }});
  }
  const auto square = [](std::int64_t S, std::int64_t D, bool causal) {
    return AttentionCase{2,
                         4,
                         S,
                         S,
                         D,
                         causal,
                         std::string("attention_") + (causal ? "causal_" : "") + "s" + std::to_string(S) + "_d" +
                             std::to_string(D)};
  };
  for (const AttentionCase& ac : {square(32, 16, false), square(128, 64, false)})
    entries.push_back({"small", ac.name, [=, &opt] { return bench_attention(ac, opt); }});
  // Decode steps: one query row per head against a long KV cache.
  for (const AttentionCase& ac :
       {AttentionCase{1, 32, 1, 2048, 128, false, "attention_decode_h32_n2048_d128"},
        AttentionCase{1, 8, 1, 8192, 128, false, "attention_decode_h8_n8192_d128"},
        AttentionCase{1, 32, 1, 2048, 128, false, "attention_decode_kt_h32_n2048_d128", true}})
    entries.push_back({"small", ac.name, [=, &opt] { return bench_attention(ac, opt); }});
  entries.push_back({"gated", "gated_silu_512x768x2048", [&] { return bench_gated(512, 768, 2048, opt); }});
  for (bool causal : {false, true})
    for (std::int64_t s : {512, 2048})
      for (std::int64_t d : {64, 128}) {
        const AttentionCase ac = square(s, d, causal);
        entries.push_back({"attention", ac.name, [=, &opt] { return bench_attention(ac, opt); }});
      }
  // Norm chains and pointwise kinds of rows x len: the listed 4096 x 4096, or the caller's RxC.
  const auto add_streaming = [&](std::int64_t rows, std::int64_t len) {
    const std::string rc = std::to_string(rows) + "x" + std::to_string(len);
    entries.push_back(
        {"norm", "rmsnorm_residual_weight_" + rc, [=, &opt] { return bench_norm("rmsnorm", rows, len, opt); }});
    entries.push_back(
        {"norm", "layer_norm_weight_bias_" + rc, [=, &opt] { return bench_norm("layer_norm", rows, len, opt); }});
    // (Not a listed target: a row softmax, e^x for every element, its exponential the cost.)
    entries.push_back(
        {"norm", "softmax_weight_bias_" + rc, [=, &opt] { return bench_norm("softmax", rows, len, opt); }});
    entries.push_back(
        {"pointwise", "pointwise_swish_gate_" + rc, [=, &opt] { return bench_pointwise(false, rows, len, opt); }});
    entries.push_back(
        {"pointwise", "pointwise_reduce_sumsq_" + rc, [=, &opt] { return bench_pointwise(true, rows, len, opt); }});
  };
  add_streaming(4096, 4096);
  if (!opt.shapes.empty()) entries.clear(); // --shape: only the caller's shapes
  for (const CallerShape& c : opt.shapes) {
    const auto& d = c.dims;
    if (c.streaming()) {
      add_streaming(d[0], d[1]);
      continue;
    }
    if (c.attention()) {
      const std::string nm = std::string("attention_") + (c.causal ? "causal_" : "") + std::to_string(d[0]) + "x" +
                             std::to_string(d[1]) + "x" + std::to_string(d[2]) + "x" + std::to_string(d[3]) + "x" +
                             std::to_string(d[4]);
      const AttentionCase ac{d[0], d[1], d[2], d[3], d[4], c.causal, nm};
      entries.push_back({"attention", nm, [=, &opt] { return bench_attention(ac, opt); }});
      continue;
    }
    const std::string nm =
        "gemm_bias_gelu_" + std::to_string(d[0]) + "x" + std::to_string(d[1]) + "x" + std::to_string(d[2]);
    entries.push_back({"gemm", nm, [=, &opt] { return bench_fused(nm, d[0], d[1], d[2], false, opt); }});
  }

  if (!host_has_avx512() && lane_choice().empty())
    std::fprintf(stderr, "fusor-bench: this host lacks AVX-512, so x86_avx512 and x86_amx decline; fusor's times are "
                         "the faster of the x86_avx2 lane's and the portable x86_c lane's\n");
  // The FMA peak is read again after every case: a shared host's speed can move by 2x within
  // minutes (run bd), so each case's ceiling is the higher of the readings around it.
  std::optional<double> peak = fma_peak_gflops();
  json doc;
  doc["machine"] = machine(peak, tile_rate());
  doc["cases"] = json::array();
  if (!opt.json_lines) std::printf("%s\n", doc["machine"].dump().c_str());
  int ran = 0;
  for (const auto& e : entries) {
    if (opt.suite != "all" && e.suite != opt.suite) continue;
    if (!opt.filter.empty() && e.name.find(opt.filter) == std::string::npos) continue;
    const Result r = e.fn();
    std::optional<double> case_peak = peak;
    json readings;
    if (const std::optional<double> after = peak ? fma_peak_gflops() : std::nullopt)
      readings = {*peak, *after}, case_peak = std::max(*peak, *after), peak = after;
    json j = to_json(r, case_peak);
    if (j.contains("fma_peak_gflops")) j["fma_peak_readings"] = readings; // a compute case with a peak
    if (opt.json_lines)
      std::printf("%s\n", j.dump().c_str()), std::fflush(stdout);
    else
      print_human(j);
    doc["cases"].push_back(j);
    ++ran;
  }
  if (ran == 0) die("no case matches suite '" + opt.suite + "' and filter '" + opt.filter + "'");
  // The tiles' rate may have changed during the run (the x86_amx lane's times with it).
  if (const auto after = tile_rate()) {
    doc["machine"]["amx_tile_ns_per_product_after"] = after->ns_per_product;
    if (!opt.json_lines)
      std::printf("%s\n", json{{"amx_tile_ns_per_product_after", after->ns_per_product}}.dump().c_str());
  }
  if (!opt.save.empty()) {
    std::ofstream f(opt.save);
    f << doc.dump(2) << "\n";
    if (!f) die("cannot write " + opt.save);
  }
  return 0;
}

} // namespace
} // namespace fusor::bench

int main(int argc, char** argv) {
#ifdef FUSOR_BENCH_OPENBLAS
  // OpenBLAS's pthread workers spin for 2^28 cycles (about 0.1 s) after each call before they
  // sleep, so the contender timed next (fusor, in every interleaved round) ran against two
  // spinning threads on the same two cores: 2048^3 fusor 50-93 ms from run to run against
  // 49-54 ms with the workers parked at once, oneDNN 49-64 either way (Zen 5 VM). OpenBLAS
  // reads the timeout in its load-time constructor, so the bench execs itself again with the
  // shortest one (2^4 cycles) unless the caller set one; OpenBLAS's own calls then include
  // waking its workers, as they do in any program that does other work between them.
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    execv("/proc/self/exe", argv); // returns only on failure: the run goes on with spinning workers
    std::fprintf(stderr, "fusor-bench: re-exec with OPENBLAS_THREAD_TIMEOUT=4 failed: %s\n", std::strerror(errno));
  }
#endif
  fusor::bench::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fusor::bench::die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--filter")
      opt.filter = value();
    else if (a == "--json")
      opt.json_lines = true;
    else if (a == "--save")
      opt.save = value();
    else if (a == "--lane")
      fusor::bench::lane_choice() = value();
    else if (a == "--knob") {
      const std::string kv = value();
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
        fusor::bench::die("--knob takes KEY=VALUE, not '" + kv + "'");
      fusor::bench::knobs()[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (a == "--min-ms")
      opt.min_ms = std::atof(value().c_str());
    else if (a == "--shape")
      opt.shapes.push_back(fusor::bench::parse_shape(value()));
    else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: fusor-bench SUITE [--filter TEXT] [--json] [--save FILE] [--min-ms MS] [--knob KEY=VALUE]\n"
          "       [--lane x86_amx|x86_avx512|x86_avx2] [--shape MxNxK | BxHxMxNkxD[:causal] | RxC ...]\n"
          "SUITE: gemm | gated | attention | norm | pointwise | small | all (small: shapes where fixed costs show)\n"
          "--lane: the one lane of every case whose kind it computes (x86_amx: GEMM-rooted and attention; the "
          "others keep the base lane). Default: GEMM-rooted and attention cases on x86_amx and x86_avx512 where "
          "the host has AMX, the faster one's time fusor's, as its arbiter picks, else x86_avx512; every other "
          "case on x86_avx512. A host without AVX-512 runs every case on x86_avx2 and the portable x86_c lane, "
          "the faster one's time fusor's\n"
          "--shape MxNxK | BxHxMxNkxD[:causal] | RxC (repeatable): f32 GEMM + bias + GELU cases, attention cases "
          "of B x H heads of M queries against Nk keys of D features (causal: top-left), or norm and pointwise "
          "cases of R rows of C, of these shapes instead of the listed ones (SUITE then the shapes' own, all or "
          "left out; RxC takes SUITE norm, pointwise or all)\n"
          "--knob KEY=VALUE (repeatable): a lane option for A/B runs (mr, kc, nb, byhead, ...), given to the "
          "kernels of the lanes timed for fusor, not to the peers' or side contenders'; a lane that does not take "
          "KEY refuses it and names those it takes. Each case and the saved machine record the knobs, and "
          "fusor-results leaves such cases out of the targets\n");
      return 0;
    } else if (opt.suite.empty() && a[0] != '-')
      opt.suite = a;
    else
      fusor::bench::die("unknown argument '" + a + "' (see --help)");
  }
  const std::string suites = "gemm | gated | attention | norm | pointwise | small | all";
  // The suite of the --shape cases: gemm, attention, all for both; RxC cases are whichever of
  // norm and pointwise SUITE names (both under all).
  std::string shaped;
  bool streaming = false;
  for (const auto& c : opt.shapes) {
    if (c.streaming()) {
      streaming = true;
      continue;
    }
    const std::string own = c.attention() ? "attention" : "gemm";
    shaped = shaped.empty() || shaped == own ? own : "all";
  }
  if (streaming && opt.suite != "norm" && opt.suite != "pointwise" && opt.suite != "all")
    fusor::bench::die("--shape RxC adds norm and pointwise cases: SUITE must be norm, pointwise or all, not '" +
                      opt.suite + "'");
  if (opt.suite.empty()) opt.suite = shaped;
  if (opt.suite.empty()) fusor::bench::die("missing SUITE (" + suites + ")");
  if (!shaped.empty() && opt.suite != shaped && opt.suite != "all")
    fusor::bench::die("--shape adds " + (shaped == "all" ? std::string("GEMM and attention") : shaped) +
                      " cases: SUITE must be " + (shaped == "all" ? std::string("all") : shaped + " or all") +
                      ", not '" + opt.suite + "'");
  if (opt.suite != "all" && opt.suite != "gemm" && opt.suite != "gated" && opt.suite != "attention" &&
      opt.suite != "norm" && opt.suite != "pointwise" && opt.suite != "small")
    fusor::bench::die("unknown suite '" + opt.suite + "' (" + suites + ")");
  return fusor::bench::run(opt);
}
