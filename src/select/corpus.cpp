// The autotuning corpus: versioned JSON, loaded at start, written atomically.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "fusor/arbiter.hpp"
#include "fusor/cache.hpp"
#include "fusor/log.hpp"

namespace fusor {
namespace {

bool same_key(const CorpusRow& a, const CorpusRow& b) {
  return a.device == b.device && a.target == b.target && a.op == b.op && a.region == b.region && a.bucket == b.bucket &&
         a.dtype == b.dtype && a.timing == b.timing;
}

nlohmann::json row_json(const CorpusRow& r) {
  nlohmann::json measured = nlohmann::json::object();
  for (const auto& [name, t] : r.measured) measured[name] = {{"median_ms", t.median_ms}, {"spread_ms", t.spread_ms}};
  return {{"device", r.device}, {"target", r.target}, {"op", r.op},         {"region", r.region},  {"bucket", r.bucket},
          {"dtype", r.dtype},   {"timing", r.timing}, {"winner", r.winner}, {"measured", measured}};
}

CorpusRow row_from(const nlohmann::json& j) {
  CorpusRow r;
  r.device = j.at("device").get<std::string>();
  r.target = j.at("target").get<std::string>();
  r.op = j.at("op").get<std::string>();
  r.region = j.at("region").get<std::string>();
  r.bucket = j.at("bucket").get<std::string>();
  r.dtype = j.at("dtype").get<std::string>();
  r.timing = j.at("timing").get<std::string>();
  r.winner = j.at("winner").get<std::string>();
  for (const auto& [name, t] : j.at("measured").items())
    r.measured[name] = {t.at("median_ms").get<double>(), t.at("spread_ms").get<double>()};
  return r;
}

} // namespace

Expected<std::filesystem::path> Corpus::default_path() {
  if (const char* env = std::getenv("FUSOR_CORPUS"); env && *env) return std::filesystem::path(env);
  FUSOR_TRY_ASSIGN(auto dir, DiskCache::default_dir());
  return dir / "corpus.json";
}

Corpus Corpus::load(const std::filesystem::path& path) {
  Corpus corpus;
  corpus.path_ = path;
  std::ifstream in(path);
  if (!in) return corpus; // no corpus yet
  std::stringstream text;
  text << in.rdbuf();
  const auto json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded() || !json.is_object() || json.value("version", 0) != kVersion) {
    log_line("corpus " + path.string() + " is unreadable or of another version; starting empty");
    return corpus;
  }
  try {
    for (const auto& row : json.at("rows")) corpus.rows_.push_back(row_from(row));
  } catch (const nlohmann::json::exception& e) {
    log_line("corpus " + path.string() + " has a malformed row (" + e.what() + "); starting empty");
    corpus.rows_.clear();
  }
  return corpus;
}

Status Corpus::save() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : rows_) rows.push_back(row_json(r));
  const nlohmann::json doc = {{"version", kVersion}, {"rows", rows}};
  std::error_code ec;
  if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path(), ec);
  // Atomic: a reader sees the old corpus or the new one, never half of one.
  const auto tmp = path_.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump(2) << "\n";
    if (!out) return make_error(ErrorCode::io_error, "cannot write corpus " + tmp);
  }
  std::filesystem::rename(tmp, path_, ec);
  if (ec) return make_error(ErrorCode::io_error, "cannot replace corpus " + path_.string() + ": " + ec.message());
  return {};
}

// Rows measured on another device or toolchain never match: the fingerprint is in the key.
const CorpusRow* Corpus::find(const CorpusRow& key) const {
  for (const auto& r : rows_)
    if (same_key(r, key)) return &r;
  return nullptr;
}

void Corpus::put(CorpusRow row) {
  drop(row);
  rows_.push_back(std::move(row));
}

void Corpus::drop(const CorpusRow& key) {
  std::erase_if(rows_, [&](const CorpusRow& r) { return same_key(r, key); });
}

} // namespace fusor
