// verify(): probes → isolated native run → comparison against the double reference.
#include "fusor/oracle.hpp"

#include <chrono>
#include <cmath>

#include "codegen/abi.hpp"
#include "fusor/reference.hpp"
#include "verify/probes.hpp"

namespace fusor {

std::string_view probe_family_name(ProbeFamily family) {
  switch (family) {
  case ProbeFamily::fixed: return "fixed";
  case ProbeFamily::ragged: return "ragged";
  case ProbeFamily::exact_int: return "exact_int";
  case ProbeFamily::large: return "large";
  case ProbeFamily::special: return "special";
  case ProbeFamily::masked: return "masked";
  }
  return "?";
}

Comparison compare_outputs(std::span<const float> got, std::span<const double> expected, double atol, double rtol) {
  Comparison c;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double o = i < got.size() ? got[i] : std::nan("");
    // The reference's answer as the f32 output can hold it (values past FLT_MAX are inf).
    const double r = static_cast<double>(static_cast<float>(expected[i]));
    bool good = false;
    double err = 0;
    if (std::isnan(r) || std::isnan(o)) {
      good = std::isnan(r) && std::isnan(o);
      err = good ? 0 : INFINITY;
    } else if (std::isinf(r) || std::isinf(o)) {
      good = o == r;
      err = good ? 0 : INFINITY;
    } else {
      err = std::fabs(o - r);
      good = err <= atol + rtol * std::fabs(r);
      if (std::fabs(r) > atol) c.max_rel_err = std::max(c.max_rel_err, err / std::fabs(r));
    }
    c.max_abs_err = std::max(c.max_abs_err, err);
    if (!good && c.ok) {
      c.ok = false;
      c.first_bad = static_cast<std::int64_t>(i);
      c.got = o;
      c.expected = r;
    }
  }
  return c;
}

Expected<VerifyReport> verify(const Region& region, const Target& target, const Artifact& artifact,
                              const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport report;
  report.lane = artifact.source.lane;
  report.budget = lane_budget(report.lane, region_storage(region));
  report.atol = std::max(options.caller_atol, report.budget.atol);
  report.rtol = report.budget.rtol;
  if (!target.run_isolated)
    return make_error(ErrorCode::runner_unavailable,
                      "target " + target.name + " has no isolated runner to verify with");

  const auto probes = probing::make_probes(region, artifact.source);
  std::vector<KernelCall> calls;
  std::vector<TensorF64> expected;
  for (const auto& probe : probes) {
    auto call = codegen::prepare_call(region, probe.operands);
    if (!call) return make_error(ErrorCode::internal, "probe " + probe.shape_text + ": " + call.error().str());
    FUSOR_TRY_ASSIGN(TensorF64 ref, evaluate_reference_f64(region, probe.operands));
    calls.push_back({std::move(call->operand_bytes), std::move(call->dims), shape_numel(call->shape.output)});
    expected.push_back(std::move(ref));
    const std::string family(probe_family_name(probe.family));
    if (std::find(report.families.begin(), report.families.end(), family) == report.families.end())
      report.families.push_back(family);
    report.seeds.push_back(probe.seed);
  }
  report.probes = static_cast<int>(probes.size());

  auto fail = [&](const probing::Probe& probe, std::string reason) {
    report.verified = false;
    report.failure =
        ProbeFailure{std::string(probe_family_name(probe.family)), probe.shape_text, probe.seed, std::move(reason)};
  };
  FUSOR_TRY_ASSIGN(SandboxOutcome outcome, target.run_isolated(artifact, calls, options.timeout));
  report.verified = true;
  if (outcome.kind != SandboxOutcome::Kind::ok) {
    const size_t at = outcome.failed_call >= 0 ? static_cast<size_t>(outcome.failed_call) : 0;
    std::string reason = std::string(sandbox_kind_name(outcome.kind)) + ": " + outcome.detail;
    if (outcome.kind == SandboxOutcome::Kind::kernel_error && outcome.return_code == codegen::kKernelDimsMismatch)
      reason += " (kernel refused the probe's dims)";
    fail(probes[std::min(at, probes.size() - 1)], reason);
  } else {
    for (size_t i = 0; i < probes.size(); ++i) {
      const bool exact = probes[i].bit_exact;
      const Comparison c =
          compare_outputs(outcome.outputs[i], expected[i].data, exact ? 0.0 : report.atol, exact ? 0.0 : report.rtol);
      report.max_abs_err = std::max(report.max_abs_err, c.max_abs_err);
      report.max_rel_err = std::max(report.max_rel_err, c.max_rel_err);
      if (!c.ok && report.verified) {
        std::string where = "element " + std::to_string(c.first_bad);
        fail(probes[i], "mismatch at " + where + ": got " + std::to_string(c.got) + ", expected " +
                            std::to_string(c.expected) + (exact ? " (exact-integer probe: bit-exact expected)" : ""));
      }
    }
  }
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  report.elapsed_ms = ms.count();
  return report;
}

} // namespace fusor
