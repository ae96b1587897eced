#include "comm_queue.h"

#include <ATen/core/grad_mode.h>

#include "fsdpp/common/error.h"

namespace fsdpp::dist {

std::string detail::exception_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

namespace {

std::string first_line_of(const std::exception_ptr& e) {
  std::string why = detail::exception_text(e);
  if (auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
  return why;
}

}  // namespace

CommQueue::CommQueue() : shared_(std::make_shared<Shared>()), thread_(&CommQueue::loop, shared_) {}

CommQueue::~CommQueue() {
  bool leave = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
    leave = shared_->running && shared_->abandoned;
  }
  shared_->cv.notify_all();
  if (!thread_.joinable()) return;
  // A collective stuck in Gloo ends at Gloo's own timeout, so the join is bounded; an abandoned
  // one would only hold this process for that long after its error is known.
  if (leave) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

void CommQueue::push(std::shared_ptr<detail::WorkState> state, std::function<void()> body) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->tasks.push_back(Task{std::move(state), std::move(body)});
  }
  shared_->cv.notify_one();
}

std::function<void(const std::string&)> CommQueue::abandoner() const {
  std::weak_ptr<Shared> weak = shared_;
  return [weak](const std::string& why) {
    if (auto s = weak.lock()) {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->abandoned = s->running;
      if (!s->failure) s->failure = why;
    }
  };
}

void CommQueue::loop(std::shared_ptr<Shared> s) {
  // Communication buffers never need autograd.
  at::NoGradGuard no_grad;
  for (;;) {
    Task task;
    std::optional<std::string> failure;
    {
      std::unique_lock<std::mutex> lock(s->mutex);
      s->cv.wait(lock, [&] { return s->stop || !s->tasks.empty(); });
      if (s->tasks.empty()) return;  // stop and drained
      task = std::move(s->tasks.front());
      s->tasks.pop_front();
      failure = s->failure;
      s->running = !failure;
    }
    std::exception_ptr error;
    if (failure) {
      error = std::make_exception_ptr(CommError(fmt::format(
          "[dist] {}: not run, because an earlier collective of this group failed: {}",
          task.state->description, *failure)));
    } else {
      try {
        task.body();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(s->mutex);
      s->running = false;
      s->abandoned = false;
      if (error && !s->failure) s->failure = first_line_of(error);
    }
    {
      std::lock_guard<std::mutex> lock(task.state->mutex);
      task.state->done = true;
      task.state->error = error;
      task.state->not_run = failure.has_value();
    }
    task.state->cv.notify_all();
  }
}

}  // namespace fsdpp::dist
