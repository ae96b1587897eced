#pragma once
// Turns a stalled or failed collective into a sentence about where the ranks' collective
// sequences diverge, through the group's store. Shared by a ProcessGroup, its queue thread and
// its Work handles (which may outlive the group).
//
// By default it costs one record per collective (CollectiveTrace): nothing is exchanged until a
// wait stalls. A rank whose wait has not finished after stall_after() publishes its recent
// records under "trace/<group rank>" and, while it keeps waiting, compares them with the traces
// other stalled ranks published: when they disagree the wait ends at once with the divergence,
// long before the timeout. When the timeout comes first, the error says where each rank is.
//
// Gloo's transport thread aborts the process (std::terminate) when a peer sends a message of
// another size than the collective expects, which is how most mismatches end. watch_abort()
// makes such a process publish its trace before it dies, and a rank that then sees its peer's
// connection close looks for that trace before it reports the error.
//
// With FSDPP_COLLECTIVE_CHECK=1 every collective is first checked: each rank puts its record
// under "check/<index>/<group rank>" and reads everyone's before the collective runs, so a
// mismatch is reported before any data moves (PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL does the
// same). It costs a few store round trips per collective.

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collective_trace.h"

namespace c10d {
class Store;
}

namespace fsdpp::dist::detail {

class CollectiveMonitor {
 public:
  // `store` is the group's own (prefixed) store; `check_each` turns on the per-collective check.
  CollectiveMonitor(c10::intrusive_ptr<c10d::Store> store, std::string group, int rank, int size,
                    std::vector<int> global_ranks, std::chrono::milliseconds timeout,
                    bool check_each);

  const std::string& group() const { return group_; }
  bool check_each() const { return check_each_; }
  CollectiveTrace& trace() { return trace_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // How long a wait runs before it publishes its trace: a fifth of the timeout, at most 5 s.
  std::chrono::milliseconds stall_after() const;

  // A stalled wait: publishes this rank's trace on construction (the first of several
  // concurrent stalls does) and withdraws it on destruction (the last does), so that a trace in
  // the store belongs to a rank that is stuck right now, unless keep() was called: a wait that
  // fails leaves its trace for the other ranks to compare with.
  class Stall {
   public:
    Stall(CollectiveMonitor& m, uint64_t waiting);
    ~Stall();
    void keep();
    Stall(const Stall&) = delete;
    Stall& operator=(const Stall&) = delete;

   private:
    CollectiveMonitor& m_;
  };

  // Whether another rank has a trace published now (it is stalled, or failed): then a wait
  // that has not stalled yet compares at once. One store read; never throws.
  bool others_published();

  // The divergence between this rank's records and the traces other ranks have published, if
  // any. Reads the traces only when some were published or withdrawn since the last call,
  // unless `force`. Never throws (a store that cannot be reached gives nullopt).
  std::optional<std::string> divergence(bool force = false);
  // For a wait that failed without a divergence: where each rank is, naming the ranks that
  // published nothing. Never throws.
  std::string progress(uint64_t waiting);
  // "; the rendezvous store (hosted by rank 0 ...) has not answered ..." when the store's host
  // does not answer a probe within stall_after(); else empty. Never throws.
  std::string store_note();

  // FSDPP_COLLECTIVE_CHECK: exchanges `rec` with every rank of the group before it runs. Throws
  // CommError naming the divergence, or TimeoutError naming the ranks that never got to it.
  void verify(const CollectiveRecord& rec);

  // Publishes this rank's trace for good, with `note` (why the process is dying), and returns
  // the divergence from the other ranks' traces if they show one within `patience` (they
  // publish theirs when they see this one). For the terminate handler; never throws.
  std::optional<std::string> publish_final(const std::string& note,
                                           std::chrono::milliseconds patience);

 private:
  void publish(uint64_t waiting, const std::string& note = "");
  std::vector<RankTrace> read_others();
  RankTrace own(uint64_t waiting) const;

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Store> check_store_;  // a client of its own: a blocked check must
                                                 // not hold up a stalled wait's store reads
  std::string group_;
  int rank_;
  int size_;
  std::vector<int> global_ranks_;
  std::chrono::milliseconds timeout_;
  bool check_each_;
  CollectiveTrace trace_;
  std::mutex stall_mutex_;
  int stalls_ = 0;
  uint64_t stalled_on_ = 0;
  bool kept_ = false;     // a failed wait's trace stays published
  bool counted_ = false;  // this rank is counted in the store's number of published traces
  int64_t seen_version_ = -1;  // kVersionKey when divergence() last read the traces
};

// FSDPP_COLLECTIVE_CHECK: unset, "0" or "" off, "1" on; anything else throws ConfigError.
bool collective_check_from_env();

// Has `monitor` publish its trace if the process is about to die in std::terminate (the first
// call installs a terminate handler that does so for every watched monitor still alive, waiting
// at most 2 s for the store, then calls the handler it replaced). std::terminate is process-wide,
// so this is the one piece of process-wide state in fsdpp::dist.
void watch_abort(const std::shared_ptr<CollectiveMonitor>& monitor);

}  // namespace fsdpp::dist::detail
