#include "deadline_store.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <algorithm>
#include <thread>

#include "fsdpp/common/error.h"

namespace fsdpp::dist::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Calls that wait for keys (get, wait) are bounded by the wrapped store's own timeout, which
// makes them fail with c10d's message first; this margin lets that message win.
constexpr std::chrono::milliseconds kWaitMargin{2000};

std::string first_line(std::string text) {
  if (const auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return text;
}

}  // namespace

struct DeadlineStore::Worker {
  struct Job {
    std::function<void()> fn;
    std::optional<Clock::time_point> started;  // a call's deadline counts from here, not from
                                               // when it was queued behind a long wait
  };
  std::mutex mutex;
  std::condition_variable cv;  // a job started or finished, or the worker is closing
  std::deque<std::shared_ptr<Job>> jobs;
  bool closing = false;
  // Set while a call that missed its deadline is still running on the thread.
  std::string blocked_in;
  Clock::time_point blocked_since;
  // Set for good once a call found the connection closed (the host exited or died): every
  // later call fails at once, instead of c10d's client logging another failed send, with its
  // stack trace, for each.
  std::string gone;
  std::thread thread;

  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return closing || !jobs.empty(); });
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
        job->started = Clock::now();
      }
      cv.notify_all();
      job->fn();
      {
        std::lock_guard<std::mutex> lock(mutex);
        blocked_in.clear();
      }
      cv.notify_all();
    }
  }
};

DeadlineStore::DeadlineStore(c10::intrusive_ptr<c10d::Store> inner, std::string host,
                             std::chrono::milliseconds timeout)
    : c10d::Store(timeout), inner_(std::move(inner)), host_(std::move(host)),
      worker_(std::make_shared<Worker>()) {
  // The thread owns the worker too: a call blocked past our destruction must not free it.
  worker_->thread = std::thread([w = worker_] { w->loop(); });
}

DeadlineStore::~DeadlineStore() {
  bool blocked;
  {
    std::lock_guard<std::mutex> lock(worker_->mutex);
    worker_->closing = true;
    blocked = !worker_->blocked_in.empty();
  }
  worker_->cv.notify_all();
  if (blocked) {
    worker_->thread.detach();  // stuck in a socket read that may never return
  } else {
    worker_->thread.join();
  }
}

std::string DeadlineStore::unresponsive() const {
  std::lock_guard<std::mutex> lock(worker_->mutex);
  if (!worker_->gone.empty()) return worker_->gone;
  if (worker_->blocked_in.empty()) return {};
  const double s = std::chrono::duration<double>(Clock::now() - worker_->blocked_since).count();
  return fmt::format("the rendezvous store ({}) has not answered '{}' for {:.1f} s: its host is "
                     "stopped (SIGSTOP, a debugger), hung, or unreachable",
                     host_, worker_->blocked_in, s);
}

template <typename R, typename F>
R DeadlineStore::call(const char* op, const std::string& key, std::chrono::milliseconds bound,
                      F fn) {
  auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
  auto result = task->get_future();
  auto job = std::make_shared<Worker::Job>();
  job->fn = [task] { (*task)(); };
  const std::string what = key.empty() ? std::string(op) : fmt::format("{} {}", op, key);
  auto& w = *worker_;
  std::unique_lock<std::mutex> lock(w.mutex);
  auto refuse = [&] {
    const double s = std::chrono::duration<double>(Clock::now() - w.blocked_since).count();
    FSDPP_THROW(TimeoutError,
                "[dist] store call '{}' refused: the rendezvous store ({}) has not answered "
                "'{}' for {:.1f} s; its host is stopped (SIGSTOP, a debugger), hung, or "
                "unreachable",
                what, host_, w.blocked_in, s);
  };
  if (!w.gone.empty()) {
    FSDPP_THROW(CommError, "[dist] store call '{}' refused: {}", what, w.gone);
  }
  if (!w.blocked_in.empty()) refuse();
  w.jobs.push_back(job);
  w.cv.notify_all();
  // Queued behind another call (the c10d client runs one at a time anyway): wait for it to
  // finish, or for its caller to declare the store blocked.
  w.cv.wait(lock, [&] { return job->started || !w.blocked_in.empty(); });
  if (!job->started) {
    w.jobs.erase(std::find(w.jobs.begin(), w.jobs.end(), job));
    refuse();
  }
  const auto deadline = *job->started + bound;
  lock.unlock();
  if (result.wait_until(deadline) != std::future_status::ready) {
    lock.lock();
    if (result.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
      w.blocked_in = what;
      w.blocked_since = *job->started;
      lock.unlock();
      w.cv.notify_all();
      FSDPP_THROW(TimeoutError,
                  "[dist] the rendezvous store ({}) did not answer '{}' within {} ms: its host "
                  "is stopped (SIGSTOP, a debugger), hung, or unreachable",
                  host_, what, bound.count());
    }
  }
  try {
    return result.get();
  } catch (const c10::DistNetworkError& e) {
    // The socket failed (reset, broken pipe, closed): the host is gone, not slow.
    if (!lock.owns_lock()) lock.lock();
    w.gone = fmt::format("the rendezvous store ({}) closed the connection during '{}': its host "
                         "exited or died ({})",
                         host_, what, first_line(e.what_without_backtrace()));
    FSDPP_THROW(CommError, "[dist] {}", w.gone);
  }
}

c10::intrusive_ptr<c10d::Store> DeadlineStore::clone() {
  // The clone's connection is made on this store's worker, so a dead host cannot block it.
  auto inner = call<c10::intrusive_ptr<c10d::Store>>("clone", "", timeout_,
                                                     [s = inner_] { return s->clone(); });
  return c10::make_intrusive<DeadlineStore>(std::move(inner), host_, timeout_);
}

void DeadlineStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  call<void>("set", key, timeout_, [s = inner_, key, value] { s->set(key, value); });
}

std::vector<uint8_t> DeadlineStore::compareSet(const std::string& key,
                                               const std::vector<uint8_t>& expected,
                                               const std::vector<uint8_t>& desired) {
  return call<std::vector<uint8_t>>("compareSet", key, timeout_, [s = inner_, key, expected, desired] {
    return s->compareSet(key, expected, desired);
  });
}

std::vector<uint8_t> DeadlineStore::get(const std::string& key) {
  return call<std::vector<uint8_t>>("get", key, timeout_ + kWaitMargin,
                                    [s = inner_, key] { return s->get(key); });
}

int64_t DeadlineStore::add(const std::string& key, int64_t value) {
  return call<int64_t>("add", key, timeout_, [s = inner_, key, value] { return s->add(key, value); });
}

bool DeadlineStore::deleteKey(const std::string& key) {
  return call<bool>("deleteKey", key, timeout_, [s = inner_, key] { return s->deleteKey(key); });
}

bool DeadlineStore::check(const std::vector<std::string>& keys) {
  return call<bool>("check", keys.empty() ? "" : keys.front(), timeout_,
                    [s = inner_, keys] { return s->check(keys); });
}

int64_t DeadlineStore::getNumKeys() {
  return call<int64_t>("getNumKeys", "", timeout_, [s = inner_] { return s->getNumKeys(); });
}

void DeadlineStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void DeadlineStore::wait(const std::vector<std::string>& keys,
                         const std::chrono::milliseconds& timeout) {
  call<void>("wait", keys.empty() ? "" : keys.front(), timeout + kWaitMargin,
             [s = inner_, keys, timeout] { s->wait(keys, timeout); });
}

void DeadlineStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  // TCPStore's setTimeout only stores the value: no round trip that could block.
  inner_->setTimeout(timeout);
}

void DeadlineStore::append(const std::string& key, const std::vector<uint8_t>& value) {
  call<void>("append", key, timeout_, [s = inner_, key, value] { s->append(key, value); });
}

std::vector<std::vector<uint8_t>> DeadlineStore::multiGet(const std::vector<std::string>& keys) {
  return call<std::vector<std::vector<uint8_t>>>(
      "multiGet", keys.empty() ? "" : keys.front(), timeout_ + kWaitMargin,
      [s = inner_, keys] { return s->multiGet(keys); });
}

void DeadlineStore::multiSet(const std::vector<std::string>& keys,
                             const std::vector<std::vector<uint8_t>>& values) {
  call<void>("multiSet", keys.empty() ? "" : keys.front(), timeout_,
             [s = inner_, keys, values] { s->multiSet(keys, values); });
}

bool DeadlineStore::hasExtendedApi() const { return inner_->hasExtendedApi(); }

std::string DeadlineStore::probe(std::chrono::milliseconds bound) {
  if (std::string why = unresponsive(); !why.empty()) return why;
  try {
    call<bool>("check", "(liveness probe)", bound,
               [s = inner_] { return s->check({"fsdpp/liveness_probe"}); });
  } catch (const std::exception&) {
    // unresponsive() now says why, when it was the deadline; another error is not a hang.
  }
  return unresponsive();
}

namespace {

DeadlineStore* find_deadline_store(const c10::intrusive_ptr<c10d::Store>& store) {
  c10::intrusive_ptr<c10d::Store> s = store;
  while (s) {
    if (auto* d = dynamic_cast<DeadlineStore*>(s.get())) return d;
    auto* p = dynamic_cast<c10d::PrefixStore*>(s.get());
    if (p == nullptr) return nullptr;
    s = p->getUnderlyingStore();
  }
  return nullptr;
}

}  // namespace

std::string store_unresponsive(const c10::intrusive_ptr<c10d::Store>& store) {
  auto* d = find_deadline_store(store);
  return d ? d->unresponsive() : std::string();
}

std::string probe_store(const c10::intrusive_ptr<c10d::Store>& store,
                        std::chrono::milliseconds bound) {
  auto* d = find_deadline_store(store);
  return d ? d->probe(bound) : std::string();
}

}  // namespace fsdpp::dist::detail
