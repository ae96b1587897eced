#include "comm_queue.h"

#include <ATen/core/grad_mode.h>

namespace fsdpp::dist {

CommQueue::CommQueue() : thread_([this] { loop(); }) {}

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  // A collective stuck in Gloo ends at Gloo's own timeout, so this join is bounded.
  if (thread_.joinable()) thread_.join();
}

void CommQueue::push(std::shared_ptr<detail::WorkState> state, std::function<void()> body) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(Task{std::move(state), std::move(body)});
  }
  cv_.notify_one();
}

void CommQueue::loop() {
  // Communication buffers never need autograd.
  at::NoGradGuard no_grad;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_ and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::exception_ptr error;
    try {
      task.body();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(task.state->mutex);
      task.state->done = true;
      task.state->error = error;
    }
    task.state->cv.notify_all();
  }
}

}  // namespace fsdpp::dist
