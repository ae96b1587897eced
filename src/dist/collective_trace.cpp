#include "collective_trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace fsdpp::dist::detail {
namespace {

// FNV-1a, 64 bits: stable across processes and builds (std::hash is neither promised).
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t fnv(uint64_t h, char c) {
  h ^= static_cast<unsigned char>(c);
  return h * kFnvPrime;
}

// The bytes and a terminator, so that ("ab", "c") and ("a", "bc") hash apart.
uint64_t fnv(uint64_t h, std::string_view bytes) {
  for (char c : bytes) h = fnv(h, c);
  return fnv(h, '\0');
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace

std::string CollectiveRecord::describe() const {
  std::string s = op;
  if (!shape.empty() || !dtype.empty()) s += fmt::format(" of {} {}", shape, dtype);
  if (!module.empty()) s += fmt::format(" for module '{}'", module);
  return s;
}

bool CollectiveRecord::same_call(const CollectiveRecord& o) const {
  return op == o.op && shape == o.shape && dtype == o.dtype && module == o.module;
}

std::string RankTrace::serialize() const {
  nlohmann::json j;
  j["rank"] = rank;
  j["waiting"] = waiting;
  if (!note.empty()) j["note"] = note;
  auto& recs = j["records"] = nlohmann::json::array();
  for (const auto& r : records) recs.push_back({r.seq, r.hash, r.op, r.shape, r.dtype, r.module});
  return j.dump();
}

std::optional<RankTrace> RankTrace::parse(std::string_view text) {
  try {
    const auto j = nlohmann::json::parse(text);
    RankTrace t;
    t.rank = j.at("rank").get<int>();
    t.waiting = j.at("waiting").get<uint64_t>();
    if (j.contains("note")) t.note = j.at("note").get<std::string>();
    for (const auto& r : j.at("records")) {
      t.records.push_back({r.at(0).get<uint64_t>(), r.at(1).get<uint64_t>(),
                           r.at(2).get<std::string>(), r.at(3).get<std::string>(),
                           r.at(4).get<std::string>(), r.at(5).get<std::string>()});
    }
    return t;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

CollectiveRecord CollectiveTrace::record(std::string op, std::string shape, std::string dtype,
                                         std::string module) {
  std::lock_guard<std::mutex> lock(mutex_);
  CollectiveRecord r{++seq_, 0, std::move(op), std::move(shape), std::move(dtype), std::move(module)};
  uint64_t h = kFnvOffset;
  for (int i = 0; i < 8; ++i) h = fnv(h, static_cast<char>(hash_ >> (8 * i)));
  for (const std::string* field : {&group_, &r.op, &r.shape, &r.dtype, &r.module}) h = fnv(h, *field);
  r.hash = hash_ = h;
  records_.push_back(r);
  if (records_.size() > kTraceCapacity) records_.pop_front();
  return r;
}

std::vector<CollectiveRecord> CollectiveTrace::recent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {records_.begin(), records_.end()};
}

uint64_t CollectiveTrace::issued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seq_;
}

std::optional<std::string> first_divergence(const std::string& group,
                                            const std::vector<RankTrace>& traces) {
  // seq -> (rank, record) over every trace.
  std::map<uint64_t, std::vector<std::pair<int, const CollectiveRecord*>>> by_seq;
  for (const auto& t : traces) {
    for (const auto& r : t.records) by_seq[r.seq].emplace_back(t.rank, &r);
  }
  for (auto& kv : by_seq) {
    const uint64_t seq = kv.first;
    auto& at = kv.second;
    if (at.size() < 2) continue;
    const bool agree = std::all_of(at.begin(), at.end(),
                                   [&](const auto& e) { return e.second->hash == at[0].second->hash; });
    if (agree) continue;
    std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // Ranks grouped by what they issued here, in order of their lowest rank.
    std::vector<std::pair<std::vector<int>, const CollectiveRecord*>> sides;
    for (const auto& e : at) {
      const int rank = e.first;
      const CollectiveRecord* rec = e.second;
      auto it = std::find_if(sides.begin(), sides.end(),
                             [&](const auto& s) { return s.second->hash == rec->hash; });
      if (it == sides.end()) {
        sides.push_back({{rank}, rec});
      } else {
        it->first.push_back(rank);
      }
    }
    std::vector<std::string> parts;
    for (const auto& [ranks, rec] : sides) {
      parts.push_back(fmt::format("{} issued {}", rank_list(ranks), rec->describe()));
    }
    // Ranks whose trace ends before this index have not issued it.
    std::vector<int> behind;
    for (const auto& t : traces) {
      const bool has = std::any_of(at.begin(), at.end(), [&](const auto& e) { return e.first == t.rank; });
      if (!has && !t.records.empty() && t.records.back().seq < seq) behind.push_back(t.rank);
    }
    if (!behind.empty()) parts.push_back(fmt::format("{} had not issued it yet", rank_list(behind)));
    for (const auto& t : traces) {
      if (!t.note.empty()) parts.push_back(fmt::format("rank {} then {}", t.rank, t.note));
    }
    std::string before;
    const bool same_here = std::all_of(sides.begin(), sides.end(), [&](const auto& s) {
      return s.second->same_call(*sides[0].second);
    });
    if (same_here) {
      before = fmt::format(
          " (they issued the same call here, so they already differ before #{}, which is as far "
          "back as the ranks' last {} collectives reach)",
          seq, kTraceCapacity);
    } else if (seq == 1) {
      before = " (the group's first collective)";
    } else {
      before = fmt::format(" (collectives #1 to #{} agree)", seq - 1);
    }
    return fmt::format(
        "[dist] collective mismatch in group '{}': the ranks disagree at collective #{}: {}{}. "
        "Every rank must issue the same collectives in the same order; look for a "
        "rank-dependent branch around a unit's forward or a collective",
        group, seq, fmt::join(parts, "; "), before);
  }
  return std::nullopt;
}

std::string describe_progress(const std::vector<RankTrace>& traces) {
  std::vector<const RankTrace*> sorted;
  for (const auto& t : traces) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  std::vector<std::string> parts;
  for (const RankTrace* t : sorted) {
    const CollectiveRecord* waiting = nullptr;
    for (const auto& r : t->records) {
      if (r.seq == t->waiting) waiting = &r;
    }
    const uint64_t issued = t->records.empty() ? 0 : t->records.back().seq;
    if (waiting) {
      parts.push_back(fmt::format("rank {} is waiting on #{} ({}) and has issued {}", t->rank,
                                  waiting->seq, waiting->describe(), issued));
    } else if (issued > 0) {
      parts.push_back(fmt::format("rank {} has issued {} (the last: {})", t->rank, issued,
                                  t->records.back().describe()));
    } else {
      parts.push_back(fmt::format("rank {} has issued none", t->rank));
    }
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace fsdpp::dist::detail
