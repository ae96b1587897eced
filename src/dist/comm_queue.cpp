#include "comm_queue.h"

#include <ATen/core/grad_mode.h>

#include <cstdlib>

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

CommQueue::CommQueue() {
  if (const char* v = std::getenv("FSDPP_DEBUG_COMM_DELAY_CYCLES"); v && *v) {
    char* end = nullptr;
    debug_delay_cycles_ = std::strtoll(v, &end, 10);
    FSDPP_CHECK_AS(ConfigError, *end == '\0' && debug_delay_cycles_ >= 0,
                   "[dist] FSDPP_DEBUG_COMM_DELAY_CYCLES='{}' is not a number of cycles >= 0", v);
  }
  shared_ = std::make_shared<Shared>();
  thread_ = std::thread(&CommQueue::loop, shared_);
}

Stream CommQueue::stream(bool reduction, c10::Device device) {
  std::lock_guard<std::mutex> lock(streams_mutex_);
  auto& s = streams_[reduction ? 1 : 0];
  if (!s.on_device() || s.get()->device() != device) s = Stream::from_pool(device);
  return s;
}

CommQueue::~CommQueue() {
  bool leave = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
    leave = shared_->running && shared_->abandoned;
  }
  shared_->cv.notify_all();
  shared_->finish_cv.notify_all();
  if (thread_.joinable()) {
    // A collective stuck in Gloo ends at Gloo's own timeout, so the join is bounded; an
    // abandoned one would only hold this process for that long after its error is known.
    if (leave) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  // Finishers end once nothing is left to finish. One still waiting on a send or recv that its
  // peer never matched holds everything it uses and ends at the backend's timeout: leave it,
  // rather than hold up the group's owner for that long.
  std::vector<std::thread> finishers;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    finishers.swap(shared_->finishers);
    leave = shared_->busy_finishers > 0 || !shared_->finishing.empty();
  }
  for (auto& t : finishers) {
    if (leave) {
      t.detach();
    } else {
      t.join();
    }
  }
}

void CommQueue::push(std::shared_ptr<detail::WorkState> state, std::function<void()> body) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->tasks.push_back(Task{std::move(state), std::move(body)});
  }
  shared_->cv.notify_one();
}

void CommQueue::push_started(std::shared_ptr<detail::WorkState> state,
                             std::function<Finish()> start) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->tasks.push_back(Task{std::move(state), nullptr, std::move(start)});
  }
  shared_->cv.notify_one();
}

void CommQueue::complete(detail::WorkState& state, std::exception_ptr error, bool not_run) {
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.done = true;
    state.error = error;
    state.not_run = not_run;
  }
  state.cv.notify_all();
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
    Finish finish;
    if (failure) {
      error = std::make_exception_ptr(CommError(fmt::format(
          "[dist] {}: not run, because an earlier collective of this group failed: {}",
          task.state->description, *failure)));
    } else {
      try {
        if (task.start) {
          finish = task.start();
        } else {
          task.body();
        }
      } catch (...) {
        error = std::current_exception();
      }
      // The operation's tensors are released before its waiter can wake (here, or by a finisher
      // as soon as it is handed over), as finisher_loop does: once wait() returns, the caller's
      // memory is what it holds itself, not also what this thread has yet to drop.
      task.body = nullptr;
      task.start = nullptr;
      std::lock_guard<std::mutex> lock(s->mutex);
      s->running = false;
      s->abandoned = false;
      if (error && !s->failure) s->failure = first_line_of(error);
      if (finish) {
        // Started: a finisher takes it from here. Each operation waiting to be finished needs
        // an idle finisher of its own: a busy one may be blocked for as long as its send's
        // peer takes to post the recv, which can be after this operation completes (a pipeline
        // schedule sends ahead and receives in between). Counting a thread that was woken but
        // has not taken its operation yet as free for this one stranded a completed recv behind
        // a blocked send until the send timed out (ZBVZeroBubble's hang, docs/faults.md).
        s->finishing.push_back(Finishing{task.state, std::move(finish)});
        if (s->finishing.size() > static_cast<size_t>(s->idle_finishers)) {
          ++s->idle_finishers;
          s->finishers.emplace_back(&CommQueue::finisher_loop, s);
        } else {
          s->finish_cv.notify_one();
        }
        continue;
      }
    }
    task.body = nullptr;  // not run: its tensors go before the waiter wakes, as above
    task.start = nullptr;
    complete(*task.state, error, failure.has_value());
  }
}

void CommQueue::finisher_loop(std::shared_ptr<Shared> s) {
  at::NoGradGuard no_grad;
  for (;;) {
    Finishing f;
    {
      std::unique_lock<std::mutex> lock(s->mutex);
      s->finish_cv.wait(lock, [&] { return s->stop || !s->finishing.empty(); });
      if (s->finishing.empty()) {
        --s->idle_finishers;
        return;  // stop and drained
      }
      f = std::move(s->finishing.front());
      s->finishing.pop_front();
      --s->idle_finishers;
      ++s->busy_finishers;
    }
    std::exception_ptr error;
    try {
      f.finish();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      // A send or recv that failed leaves the backend out of step (Gloo closes the pairs of a
      // context whose wait timed out): nothing more runs, as after a failed collective.
      if (error && !s->failure) s->failure = first_line_of(error);
      --s->busy_finishers;
      ++s->idle_finishers;
    }
    f.finish = nullptr;  // the tensors it holds are released before the waiter wakes
    complete(*f.state, error, false);
  }
}

}  // namespace fsdpp::dist
