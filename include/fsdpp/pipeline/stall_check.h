#pragma once
// What a rank of the pipeline runtime (runtime.h) does when one of its sends or recvs has not
// completed after a while (RuntimeOptions::stall_check_after).
//
// verify() proves that a schedule finishes when sends do not block and a recv waits only for its
// own send. A wait that lasts anyway means one of two things, and without this check either sits
// until the pp group's timeout (300 s by default) and ends in a transport error that names no
// schedule:
//  - the message was sent and never delivered: the layer below the schedule broke the model
//    the verifier checked (a finished recv waiting behind a blocked send made ZBVZeroBubble hang
//    in 5 of 6 runs, docs/faults.md);
//  - the ranks wait on each other in a cycle: the schedule can deadlock after all (a gap in
//    the verifier).
// A rank that has waited `after` publishes where it is (step and action index) under
// <prefix>/<rank> in the store, then reads the position of the rank whose SEND it waits for.
// If that rank has gone past its SEND, the message was sent; if it waits, in turn, on a rank that
// has not reached its own SEND, and so on back to this rank, the wait is a cycle. Either finding
// is returned as one line naming the schedule, the step and every rank's action, once every read
// for `after` more (250 ms apart, two at least) found the same (a position just left is never
// taken for one held, and a message merely slow has had that long). Nothing touches the store
// while waits end in time.

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "fsdpp/pipeline/schedule.h"

namespace c10d {
class Store;
}

namespace fsdpp::pipeline {

class StallCheck {
 public:
  using Clock = std::chrono::steady_clock;

  StallCheck(const PipelineSchedule& schedule, int rank, c10::intrusive_ptr<c10d::Store> store,
             std::string prefix, std::chrono::milliseconds after);

  // This rank has waited since `since` at action `index` of its list (the list's size: for the
  // step's sends to complete) in its `step`-th step. The finding, when there is a certain one.
  std::optional<std::string> waiting(int64_t step, size_t index, Clock::time_point since);
  // The wait ended (or failed): withdraws a published position.
  void done();

  std::chrono::milliseconds after() const { return after_; }

 private:
  struct Position {
    int64_t step = 0;
    long index = -1;  // -1: not waiting
  };
  std::optional<Position> read(int rank) const;
  // The finding without its head (schedule, step, time waited); nothing when there is none.
  std::optional<std::string> diagnose(int64_t step, size_t index) const;
  std::string where(int rank, long index) const;

  PipelineSchedule schedule_;
  int rank_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds after_;
  // (rank, index of a RECV) -> (rank, index of the SEND that it takes).
  std::map<std::pair<int, size_t>, std::pair<int, size_t>> sender_of_;
  bool published_ = false;
  Clock::time_point last_read_;
  std::string last_finding_;
  Clock::time_point finding_since_;  // when last_finding_ was first read
};

}  // namespace fsdpp::pipeline
