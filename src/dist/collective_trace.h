#pragma once
// The sequence of collectives one rank has issued on a group, for finding the first point where
// ranks disagree ("rank 1 issued all_gather for module 'layers.2' where rank 0 issued it for
// 'layers.1'") instead of reporting a bare timeout.
//
// Every collective gets a record: its 1-based index in the group, what it is (operation, shape,
// dtype, module) and a running hash over every record up to it, so that equal hashes at index i
// mean equal sequences up to i. A group keeps the last kTraceCapacity records; that is all
// it costs by default. A rank whose collective stalls publishes its records to the store
// (RankTrace) and compares them with what the other stalled ranks published; see
// docs/faults.md.

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::dist::detail {

inline constexpr size_t kTraceCapacity = 256;

struct CollectiveRecord {
  uint64_t seq = 0;   // 1-based index of the collective in its group
  uint64_t hash = 0;  // running hash of records 1..seq
  std::string op;     // "all_gather", "all_reduce(SUM)", "broadcast(root 0)", "barrier"
  std::string shape;  // "[4, 1024]"; empty for a barrier
  std::string dtype;  // "Float"; empty for a barrier
  std::string module; // the CollectiveTag's module; may be empty

  // "all_gather of [4, 1024] Float for module 'layers.1'"
  std::string describe() const;
  // The record's own fields (not seq or hash) agree.
  bool same_call(const CollectiveRecord& other) const;
};

// What one rank publishes when it stalls: its recent records, oldest first, and the index of the
// collective it is waiting on.
struct RankTrace {
  int rank = 0;          // global rank
  uint64_t waiting = 0;  // 0: not waiting on any collective of this group
  std::vector<CollectiveRecord> records;
  std::string note;      // "aborted: ..." when the rank published on its way out

  std::string serialize() const;
  // nullopt for text that is not a serialized RankTrace.
  static std::optional<RankTrace> parse(std::string_view text);
};

// A group's records; thread-safe.
class CollectiveTrace {
 public:
  explicit CollectiveTrace(std::string group) : group_(std::move(group)) {}
  // Appends the next record and returns it (with its index and running hash).
  CollectiveRecord record(std::string op, std::string shape, std::string dtype,
                          std::string module);
  std::vector<CollectiveRecord> recent() const;
  uint64_t issued() const;

 private:
  std::string group_;
  mutable std::mutex mutex_;
  std::deque<CollectiveRecord> records_;
  uint64_t seq_ = 0;
  uint64_t hash_ = 0;
};

// The first collective at which `traces` (one per rank of `group`) disagree, as a sentence that
// names the index and each side's ranks and (operation, shape, dtype, module); nullopt when the
// traces agree on every index they have in common.
std::optional<std::string> first_divergence(const std::string& group,
                                            const std::vector<RankTrace>& traces);

// Where each rank is, for a timeout with no divergence: "rank 0 is waiting on #12 (all_gather
// of ...); rank 1 has issued 11 collectives and waits on none of this group's".
std::string describe_progress(const std::vector<RankTrace>& traces);

}  // namespace fsdpp::dist::detail
