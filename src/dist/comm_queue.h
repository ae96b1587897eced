#pragma once
// One thread per process group that runs its collectives in the order they were issued.
//
// c10d's Gloo backend matches collectives across ranks by issue order, and the composite ones
// (ring reduce-scatter over send/recv) are several calls in a row; running them all on one
// queue keeps that order while the caller goes on computing (the async forms).
//
// After one collective fails the group is out of step with its peers, so the queue runs nothing
// more: every later task fails at once ("not run: an earlier collective of this group failed").
//
// Point-to-point operations are started on the queue thread in issue order too, but finished
// elsewhere (push_started): a recv waits for a peer that may first need this rank's next send,
// so the queue must not block on it. A finisher thread per operation in flight waits for each
// (threads are reused; there are as many as operations were ever in flight at once).

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fsdpp/dist/device.h"

namespace fsdpp::dist {
class TraceRecorder;
namespace detail {

class CollectiveMonitor;
struct DeviceOrder;  // device_order.h

// The what() of the exception in `e` ("unknown error" for one that is not a std::exception),
// whole: callers cut it to the part they report.
std::string exception_text(const std::exception_ptr& e);

struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  bool not_run = false;  // failed without running because an earlier collective failed
  // For messages: "rank 1 (group 'default', 1 of 2): collective #7, reduce_scatter of 4096 B
  // Float for module 'layers.3'".
  std::string description;
  std::chrono::milliseconds timeout{0};
  uint64_t seq = 0;  // the collective's index in its group
  // Null only for work made outside a ProcessGroup.
  std::shared_ptr<CollectiveMonitor> monitor;
  // Gives up on this collective while it still runs; see CommQueue::abandon.
  std::function<void(const std::string&)> abandon;
  // Set when issued during a profiled step: wait() records the time it blocked on `trace`'s
  // thread track, named `trace_name` ("wait all_gather").
  std::shared_ptr<TraceRecorder> trace;
  std::string trace_name;
  std::string trace_module;
  std::string trace_group;
  // Set when the collective's tensors are on a device (device_order.h): wait() makes the
  // waiter's current stream wait for it, then lets go of its tensors.
  std::shared_ptr<DeviceOrder> order;
};

}  // namespace detail

class CommQueue {
 public:
  CommQueue();
  // Joins the thread after it ran (or failed) what is queued; when a caller abandoned the task
  // that is still running, leaves that thread behind instead (it holds everything it uses, and
  // ends when the backend's own timeout ends the task).
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  void push(std::shared_ptr<detail::WorkState> state, std::function<void()> body);

  // `start` runs on the queue thread in issue order and returns `finish`, which a finisher
  // thread then runs (it blocks until the operation completes, or throws); the task is done
  // when `finish` returns. A failure in either stops the queue as push()'s does.
  using Finish = std::function<void()>;
  void push_started(std::shared_ptr<detail::WorkState> state, std::function<Finish()> start);

  // The streams this queue's thread issues collectives on GPU tensors on (device_order.h): one
  // for reductions, one for the rest (FSDP2's reduce-scatter and all-gather streams), taken from
  // the device's pool when first asked for.
  Stream stream(bool reduction, c10::Device device);
  // FSDPP_DEBUG_COMM_DELAY_CYCLES when the queue was made: the stream-race check's spin before
  // each collective on GPU tensors (0: none).
  int64_t debug_delay_cycles() const { return debug_delay_cycles_; }

  // For a caller that stops waiting on a running task (its ranks have diverged, so it would
  // only end at the timeout): the tasks behind it fail without running, with `why`.
  // Safe to call after the queue is gone.
  std::function<void(const std::string&)> abandoner() const;

 private:
  struct Task {
    std::shared_ptr<detail::WorkState> state;
    std::function<void()> body;          // push()
    std::function<Finish()> start;       // push_started()
  };
  struct Finishing {
    std::shared_ptr<detail::WorkState> state;
    Finish finish;
  };
  struct Shared {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Task> tasks;
    bool stop = false;
    bool running = false;    // a task's body is executing
    bool abandoned = false;  // ... and its caller gave up on it
    std::optional<std::string> failure;  // the first task's error: nothing runs after it
    std::deque<Finishing> finishing;     // started, waiting for a finisher
    std::condition_variable finish_cv;   // finishers wait on it (cv is the queue thread's)
    // Finishers that have not taken an operation yet (started or waiting on finish_cv); never
    // fewer than the operations in `finishing`.
    int idle_finishers = 0;
    int busy_finishers = 0;
    std::vector<std::thread> finishers;
  };
  static void loop(std::shared_ptr<Shared> shared);
  static void finisher_loop(std::shared_ptr<Shared> shared);
  // Marks `state` done with `error` (null: success) and wakes its waiters.
  static void complete(detail::WorkState& state, std::exception_ptr error, bool not_run);

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
  std::mutex streams_mutex_;
  std::array<Stream, 2> streams_;  // [0] all-gathers and the rest, [1] reductions
  int64_t debug_delay_cycles_ = 0;
};

}  // namespace fsdpp::dist
