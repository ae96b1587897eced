#pragma once
// One thread per process group that runs its collectives in the order they were issued.
//
// c10d's Gloo backend matches collectives across ranks by issue order, and the composite ones
// (ring reduce-scatter over send/recv) are several calls in a row; running them all on one
// queue keeps that order while the caller goes on computing (the async forms).

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace fsdpp::dist {
namespace detail {

struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  // For messages: "rank 1 (group 'default', 1 of 2): reduce_scatter of 4096 B float32 for
  // module 'layers.3'".
  std::string description;
  std::chrono::milliseconds timeout{0};
};

}  // namespace detail

class CommQueue {
 public:
  CommQueue();
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  void push(std::shared_ptr<detail::WorkState> state, std::function<void()> body);

 private:
  void loop();

  struct Task {
    std::shared_ptr<detail::WorkState> state;
    std::function<void()> body;
  };
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fsdpp::dist
