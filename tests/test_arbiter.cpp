// The arbiter's contract (SPEC §5): applies → available → force → oracle → measured
// latency else tier; the corpus; the explain log and the outcome histogram.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "fusor/arbiter.hpp"
#include "fusor/operand_gen.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "support/compare.hpp"

namespace fusor {
namespace {

const Region kRegion = parse_region("fused { epilogue = [bias, gelu] }").value();

std::vector<Tensor> operands() {
  ProblemShape dims;
  dims.M = 17, dims.N = 13, dims.K = 31;
  return make_operands(kRegion, dims, 7, 0.5);
}

Candidate candidate(std::string name, int tier, std::string target = "x86") {
  return Candidate{std::move(name), std::move(target), RegionKind::fused, tier,
                   [](const Region&) { return std::nullopt; }};
}

// A registry with the real x86 target and test candidates around its generic lane.
Registry test_registry() {
  testing::use_test_cache();
  Registry r;
  r.add_target(*builtin_registry().target("x86"));
  Target offline = *builtin_registry().target("x86");
  offline.name = "offline";
  offline.available = [] { return Status(make_error(ErrorCode::runner_unavailable, "no such device here")); };
  r.add_target(offline);
  r.add_candidate(candidate("gen_a", 1));
  r.add_candidate(candidate("gen_b", 1));
  Candidate declines = candidate("picky", 3);
  declines.declines = [](const Region&) { return std::optional<std::string>("only does matmul"); };
  r.add_candidate(declines);
  r.add_candidate(candidate("elsewhere", 3, "offline"));
  Candidate broken = candidate("broken", 2);
  broken.emit = [](const Region& region, const EmitOptions& options) -> Expected<KernelSource> {
    FUSOR_TRY_ASSIGN(KernelSource src, builtin_registry().target("x86")->emit(region, options));
    src.source.replace(src.source.find("v = (v + bv);"), 13, "v = (v + bv + 1.0f);"); // a miscompile
    src.lane = "x86_broken";
    return src;
  };
  r.add_candidate(broken);
  return r;
}

CandidateTimer fake_timer(std::map<std::string, Timing> table, int* calls = nullptr) {
  return [table, calls](std::span<const Candidate* const> cands, const Region&,
                        std::span<const Tensor>) -> Expected<std::map<std::string, Timing>> {
    if (calls) ++*calls;
    std::map<std::string, Timing> out;
    for (const Candidate* c : cands) out[c->name] = table.at(c->name);
    return out;
  };
}

const CandidateVerdict& verdict(const DispatchLog& log, const std::string& name) {
  for (const auto& v : log.candidates)
    if (v.name == name) return v;
  static CandidateVerdict none;
  ADD_FAILURE() << "no verdict for " << name;
  return none;
}

TEST(Arbiter, EveryLoserSaysWhyAndTheFastestVerifiedWins) {
  Registry reg = test_registry();
  Arbiter arbiter(reg, nullptr, fake_timer({{"gen_a", {2.0, 0.01}}, {"gen_b", {1.0, 0.01}}}));
  const auto ops = operands();
  auto d = arbiter.dispatch(kRegion, ops);
  ASSERT_TRUE(d.ok()) << d.error().str();
  EXPECT_EQ(d->log.winner, "gen_b");
  EXPECT_EQ(d->log.outcome, DispatchOutcome::won);
  EXPECT_EQ(verdict(d->log, "gen_b").status, "won");
  EXPECT_EQ(verdict(d->log, "gen_a").status, "slower by 100%");
  EXPECT_EQ(verdict(d->log, "picky").status, "does not apply: only does matmul");
  EXPECT_NE(verdict(d->log, "elsewhere").status.find("unavailable: no such device here"), std::string::npos);
  EXPECT_NE(verdict(d->log, "broken").status.find("failed oracle"), std::string::npos);
  EXPECT_TRUE(testing::all_close(d->run.output, evaluate_reference(kRegion, ops).value()));
  EXPECT_TRUE(d->run.verified);
  EXPECT_NE(d->log.line().find("broken: failed oracle"), std::string::npos);
}

TEST(Arbiter, WithoutMeasurementsHighestTierThenRegistrationOrder) {
  Registry reg = test_registry();
  Arbiter arbiter(reg);
  ArbiterOptions no_tune;
  no_tune.autotune = false;
  auto d = arbiter.dispatch(kRegion, operands(), no_tune);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->log.winner, "gen_a"); // tiers tie (broken failed): first registered
  reg.add_candidate(candidate("gen_c", 2));
  Arbiter again(reg);
  auto d2 = again.dispatch(kRegion, operands(), no_tune);
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(d2->log.winner, "gen_c"); // higher tier
}

// A decision is remembered per region, shape bucket and options: the same ones again run the
// winner without a new selection; a new bucket, a different accuracy budget (even one that
// prints as 0.000000 to six decimals) or an equal region written anew are told apart or not
// exactly as their meaning says.
TEST(Arbiter, DecisionsAreRememberedPerRegionBucketAndOptions) {
  Registry reg = test_registry();
  Arbiter arbiter(reg, nullptr, fake_timer({{"gen_a", {2.0, 0.01}}, {"gen_b", {1.0, 0.01}}}));
  const auto ops = operands();
  ArbiterOptions tight, tighter; // one selection each: logs() grows by one per selection
  tight.caller_atol = 1e-7;
  tighter.caller_atol = 1e-8;
  ASSERT_TRUE(arbiter.dispatch(kRegion, ops, tight).ok());
  ASSERT_TRUE(arbiter.dispatch(kRegion, ops, tight).ok());
  EXPECT_EQ(arbiter.logs().size(), 1u) << "the same region, bucket and options: remembered";
  ASSERT_TRUE(arbiter.dispatch(parse_region("fused { epilogue = [bias, gelu] }").value(), ops, tight).ok());
  EXPECT_EQ(arbiter.logs().size(), 1u) << "an equal region parsed again is the same region";
  ASSERT_TRUE(arbiter.dispatch(kRegion, ops, tighter).ok());
  EXPECT_EQ(arbiter.logs().size(), 2u) << "another accuracy budget is another decision";
  ProblemShape big;
  big.M = 300, big.N = 13, big.K = 31;
  auto d = arbiter.dispatch(kRegion, make_operands(kRegion, big, 8, 0.5), tight);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(arbiter.logs().size(), 3u) << "another shape bucket is another decision";
  EXPECT_EQ(d->log.bucket, "M<=512,N<=16,K<=32");
}

TEST(Arbiter, DisplacesOnlyBeyondNoise) {
  Registry reg = test_registry();
  Arbiter arbiter(reg, nullptr, fake_timer({{"gen_a", {1.00, 0.08}}, {"gen_b", {0.95, 0.08}}}));
  auto d = arbiter.dispatch(kRegion, operands());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->log.winner, "gen_a") << "5% faster is within 8% noise: the incumbent stays";
}

TEST(Arbiter, ForcedNamesAreCheckedAndHonoured) {
  Registry reg = test_registry();
  Arbiter arbiter(reg, nullptr, fake_timer({{"gen_a", {2.0, 0.01}}, {"gen_b", {1.0, 0.01}}}));
  ArbiterOptions force;
  force.force = "nope";
  auto unknown = arbiter.dispatch(kRegion, operands(), force);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, ErrorCode::arbiter_forced_unknown);
  EXPECT_NE(unknown.error().message.find("'nope'"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("gen_a"), std::string::npos) << "lists the registered names";
  force.force = "elsewhere";
  auto unavailable = arbiter.dispatch(kRegion, operands(), force);
  ASSERT_FALSE(unavailable.ok());
  EXPECT_EQ(unavailable.error().code, ErrorCode::arbiter_forced_unknown);
  force.force = "gen_a";
  auto forced = arbiter.dispatch(kRegion, operands(), force);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->log.winner, "gen_a");
  EXPECT_EQ(verdict(forced->log, "gen_b").status, "not forced");
  force.force = "broken";
  auto degraded = arbiter.dispatch(kRegion, operands(), force);
  ASSERT_TRUE(degraded.ok());
  EXPECT_EQ(degraded->log.winner, "reference");
  EXPECT_EQ(degraded->run.tag, "reference");
  EXPECT_EQ(degraded->log.outcome, DispatchOutcome::degraded);
  EXPECT_EQ(arbiter.histogram().at("x86").won, 1u);
  EXPECT_EQ(arbiter.histogram().at("x86").degraded, 1u);
}

TEST(Arbiter, NothingLeftIsTheReferenceAndNeverWins) {
  Registry reg;
  reg.add_target(*builtin_registry().target("x86"));
  Arbiter arbiter(reg);
  auto d = arbiter.dispatch(kRegion, operands());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->run.tag, "reference");
  EXPECT_EQ(d->log.outcome, DispatchOutcome::no_candidate);
  EXPECT_EQ(arbiter.histogram().at("reference").no_candidate, 1u);
}

TEST(Arbiter, MissingOperandIsAnErrorBeforeAnything) {
  Registry reg = test_registry();
  Arbiter arbiter(reg);
  auto ops = operands();
  ops.pop_back();
  auto d = arbiter.dispatch(kRegion, ops);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::fused_epilogue_missing_operand);
}

class ArbiterCorpus : public ::testing::Test {
protected:
  // One file per test and process: ctest runs these tests concurrently.
  std::filesystem::path path =
      std::filesystem::path(FUSOR_TEST_CACHE_DIR) /
      ("test-corpus-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
       std::to_string(::getpid()) + ".json");
  void SetUp() override { std::filesystem::remove(path); }
  void TearDown() override { std::filesystem::remove(path); }
};

TEST_F(ArbiterCorpus, TwoColdTunesPickTheSameWinnerAndTheCorpusIsReused) {
  Registry reg = test_registry();
  const std::map<std::string, Timing> fake = {{"gen_a", {1.0, 0.01}}, {"gen_b", {3.0, 0.01}}};
  std::string winners[2];
  for (auto& winner : winners) {
    std::filesystem::remove(path);
    Corpus corpus = Corpus::load(path);
    Arbiter arbiter(reg, &corpus, fake_timer(fake));
    auto d = arbiter.dispatch(kRegion, operands());
    ASSERT_TRUE(d.ok());
    winner = d->log.winner;
  }
  EXPECT_EQ(winners[0], "gen_a");
  EXPECT_EQ(winners[0], winners[1]);
  // Reloaded from disk: no tuning at all.
  int calls = 0;
  Corpus reloaded = Corpus::load(path);
  ASSERT_EQ(reloaded.rows().size(), 1u);
  Arbiter warm(reg, &reloaded, fake_timer(fake, &calls));
  auto d = warm.dispatch(kRegion, operands());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->log.winner, "gen_a");
  EXPECT_EQ(calls, 0);
}

TEST_F(ArbiterCorpus, OtherDeviceRowsAreIgnoredAndFailingWinnersDropped) {
  Registry reg = test_registry();
  const std::map<std::string, Timing> fake = {{"gen_a", {1.0, 0.01}}, {"gen_b", {3.0, 0.01}}};
  {
    Corpus corpus = Corpus::load(path);
    Arbiter arbiter(reg, &corpus, fake_timer(fake));
    ASSERT_TRUE(arbiter.dispatch(kRegion, operands()).ok());
  }
  // A row from another machine: ignored, so this one tunes.
  Corpus corpus = Corpus::load(path);
  ASSERT_EQ(corpus.rows().size(), 1u);
  CorpusRow other = corpus.rows().front();
  corpus.drop(other);
  other.device = "some other CPU";
  other.winner = "gen_b";
  corpus.put(other);
  int calls = 0;
  Arbiter arbiter(reg, &corpus, fake_timer(fake, &calls));
  auto d = arbiter.dispatch(kRegion, operands());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(d->log.winner, "gen_a");
  // A stored winner that no longer passes the oracle is dropped and re-tuned.
  CorpusRow row = *corpus.find(corpus.rows().back());
  row.winner = "broken";
  corpus.put(row);
  calls = 0;
  Arbiter again(reg, &corpus, fake_timer(fake, &calls));
  auto d2 = again.dispatch(kRegion, operands());
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(d2->log.winner, "gen_a");
  EXPECT_EQ(corpus.find(row)->winner, "gen_a");
}

TEST_F(ArbiterCorpus, CorpusFileIsVersionedJson) {
  Registry reg = test_registry();
  Corpus corpus = Corpus::load(path);
  Arbiter arbiter(reg, &corpus, fake_timer({{"gen_a", {1.0, 0.01}}, {"gen_b", {3.0, 0.01}}}));
  ASSERT_TRUE(arbiter.dispatch(kRegion, operands()).ok());
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in);
  EXPECT_EQ(json.at("version"), Corpus::kVersion);
  EXPECT_EQ(json.at("rows").at(0).at("winner"), "gen_a");
  EXPECT_EQ(json.at("rows").at(0).at("bucket"), "M<=32,N<=16,K<=32");
}

TEST(Arbiter, RealMeasurementsOfTwoLanes) {
  Registry reg = test_registry();
  Arbiter arbiter(reg); // real timer
  auto d = arbiter.dispatch(kRegion, operands());
  ASSERT_TRUE(d.ok()) << d.error().str();
  EXPECT_TRUE(verdict(d->log, "gen_a").median_ms.has_value());
  EXPECT_TRUE(verdict(d->log, "gen_b").median_ms.has_value());
}

} // namespace
} // namespace fusor
