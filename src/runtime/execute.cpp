#include <chrono>

#include "fusor/log.hpp"
#include "fusor/operands.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/target.hpp"

namespace fusor {

Expected<RunOutput> execute_reference(const Region& region, std::span<const Tensor> operands) {
  const auto start = std::chrono::steady_clock::now();
  FUSOR_TRY_ASSIGN(Tensor out, evaluate_reference(region, operands));
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  return RunOutput{std::move(out), "reference", ms.count(), {}};
}

Expected<VerifyReport> ensure_verified(const Target& target, const Region& region, const Artifact& artifact,
                                       double caller_atol) {
  if (auto cert = load_certificate(artifact, artifact.source.lane, region_storage(region), caller_atol)) return *cert;
  FUSOR_TRY_ASSIGN(VerifyReport report, verify(region, target, artifact, {.caller_atol = caller_atol}));
  if (verbose()) log_line("oracle: " + report.summary());
  if (Status stored = store_certificate(artifact, report); !stored)
    log_line("could not store the oracle certificate: " + stored.error().str());
  return report;
}

Expected<RunOutput> execute_on_target(const Target& target, const Region& region, std::span<const Tensor> operands,
                                      const ExecuteOptions& options) {
  // Operand errors first: a missing bias must never reach native code.
  FUSOR_TRY(check_operands(region, operands));
  auto decline = [&](const Error& why) -> Expected<RunOutput> {
    if (!options.reference_fallback) return why;
    if (verbose()) log_line("target " + target.name + " declined: " + why.str() + "; ran the reference");
    FUSOR_TRY_ASSIGN(RunOutput out, execute_reference(region, operands));
    out.note = why.str();
    return out;
  };
  if (Status ok = target.available(); !ok) return decline(ok.error());
  auto src = emit_candidate(target, options.candidate, region, options.emit);
  if (!src)
    return src.error().code == ErrorCode::emit_unsupported ? decline(src.error()) : Expected<RunOutput>(src.error());
  FUSOR_TRY_ASSIGN(Artifact artifact, target.compile(*src));
  if (options.no_verify) {
    FUSOR_TRY_ASSIGN(RunOutput out, target.run(artifact, region, operands));
    out.tag += "+unverified";
    return out;
  }
  FUSOR_TRY_ASSIGN(VerifyReport report, ensure_verified(target, region, artifact, options.caller_atol));
  if (!report.verified) return decline(make_error(ErrorCode::oracle_rejected, report.summary()));
  FUSOR_TRY_ASSIGN(RunOutput out, target.run(artifact, region, operands));
  out.verified = true;
  return out;
}

} // namespace fusor
