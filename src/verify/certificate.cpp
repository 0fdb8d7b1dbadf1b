// Certificates: a verdict stored as a sidecar of the cached artifact it judged.
#include "fusor/cache.hpp"
#include "fusor/oracle.hpp"

namespace fusor {
namespace {

constexpr std::string_view kSidecar = "certificate.json";

} // namespace

Status store_certificate(const Artifact& artifact, const VerifyReport& report) {
  FUSOR_TRY_ASSIGN(DiskCache cache, DiskCache::open());
  return cache.write_sidecar(artifact.key, kSidecar, report.to_json().dump(2));
}

std::optional<VerifyReport> load_certificate(const Artifact& artifact, std::string_view lane, DType dtype,
                                             double caller_atol) {
  auto cache = DiskCache::open();
  if (!cache) return std::nullopt;
  auto text = cache->read_sidecar(artifact.key, kSidecar);
  if (!text) return std::nullopt;
  const auto json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return std::nullopt;
  auto report = VerifyReport::from_json(json);
  // Reusable only for the same verifier and the same effective tolerances.
  const Budget budget = lane_budget(lane, dtype);
  if (!report || report->verifier_version != kVerifierVersion || report->lane != lane || report->budget != budget ||
      report->atol != std::max(caller_atol, budget.atol) || report->rtol != budget.rtol)
    return std::nullopt;
  return report;
}

} // namespace fusor
