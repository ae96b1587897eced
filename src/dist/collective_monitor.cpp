#include "collective_monitor.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include <fmt/ranges.h>

#include "deadline_store.h"
#include "fsdpp/common/error.h"

namespace fsdpp::dist::detail {
namespace {

constexpr const char* kVersionKey = "trace_version";  // bumped on every publish and withdraw
constexpr const char* kPublishedKey = "traces";       // how many ranks have a trace published

std::string trace_key(int rank) { return "trace/" + std::to_string(rank); }
std::string check_key(uint64_t seq, int rank) {
  return "check/" + std::to_string(seq) + "/" + std::to_string(rank);
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

bool collective_check_from_env() {
  const char* v = std::getenv("FSDPP_COLLECTIVE_CHECK");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
  FSDPP_CHECK_AS(ConfigError, std::strcmp(v, "1") == 0,
                 "[dist] FSDPP_COLLECTIVE_CHECK='{}': expected 1 (check every collective's "
                 "sequence across ranks before it runs) or 0", v);
  return true;
}

CollectiveMonitor::CollectiveMonitor(c10::intrusive_ptr<c10d::Store> store, std::string group,
                                     int rank, int size, std::vector<int> global_ranks,
                                     std::chrono::milliseconds timeout, bool check_each)
    : store_(std::move(store)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout),
      check_each_(check_each),
      trace_(group_) {
  if (check_each_) check_store_ = store_->clone();
}

std::chrono::milliseconds CollectiveMonitor::stall_after() const {
  return std::clamp(timeout_ / 5, std::chrono::milliseconds(50), std::chrono::milliseconds(5000));
}

RankTrace CollectiveMonitor::own(uint64_t waiting) const {
  return RankTrace{global_ranks_[rank_], waiting, trace_.recent()};
}

void CollectiveMonitor::publish(uint64_t waiting, const std::string& note) {
  try {
    RankTrace t = own(waiting);
    t.note = note;
    store_->set(trace_key(rank_), bytes(t.serialize()));
    store_->add(kVersionKey, 1);
    if (!counted_) {
      store_->add(kPublishedKey, 1);
      counted_ = true;
    }
  } catch (const std::exception&) {
    // Diagnostics only: a store that is gone (rank 0 died) leaves the plain timeout message.
  }
}

CollectiveMonitor::Stall::Stall(CollectiveMonitor& m, uint64_t waiting) : m_(m) {
  std::lock_guard<std::mutex> lock(m_.stall_mutex_);
  if (m_.stalls_++ == 0) {
    m_.stalled_on_ = waiting;
    m_.publish(waiting);
  }
}

void CollectiveMonitor::Stall::keep() {
  std::lock_guard<std::mutex> lock(m_.stall_mutex_);
  m_.kept_ = true;
}

CollectiveMonitor::Stall::~Stall() {
  std::lock_guard<std::mutex> lock(m_.stall_mutex_);
  if (--m_.stalls_ > 0 || m_.kept_) return;
  try {
    m_.store_->deleteKey(trace_key(m_.rank_));
    m_.store_->add(kVersionKey, 1);
    if (m_.counted_) {
      m_.store_->add(kPublishedKey, -1);
      m_.counted_ = false;
    }
  } catch (const std::exception&) {
  }
}

bool CollectiveMonitor::others_published() {
  try {
    return store_->add(kPublishedKey, 0) > (counted_ ? 1 : 0);
  } catch (const std::exception&) {
    return false;
  }
}

std::optional<std::string> CollectiveMonitor::publish_final(const std::string& note,
                                                            std::chrono::milliseconds patience) {
  {
    std::unique_lock<std::mutex> lock(stall_mutex_, std::try_to_lock);
    if (lock.owns_lock()) kept_ = true;
  }
  publish(stalled_on_, note);
  const auto until = std::chrono::steady_clock::now() + patience;
  for (;;) {
    if (auto d = divergence(/*force=*/true)) {
      return fmt::format("{}. Seen by rank {}, {}", *d, global_ranks_[rank_], note);
    }
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

namespace {

struct AbortWatch {
  std::mutex mutex;
  std::vector<std::weak_ptr<CollectiveMonitor>> monitors;
  std::terminate_handler previous = nullptr;
  bool installed = false;
};

AbortWatch& abort_watch() {
  static AbortWatch w;  // lives as long as the terminate handler that uses it
  return w;
}

void publish_and_terminate() {
  std::string why = "std::terminate";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      why = ex.what();
    } catch (...) {
    }
  }
  if (auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
  auto& w = abort_watch();
  std::vector<std::shared_ptr<CollectiveMonitor>> live;
  std::terminate_handler previous = nullptr;
  {
    std::unique_lock<std::mutex> lock(w.mutex, std::try_to_lock);
    if (lock.owns_lock()) {
      for (const auto& m : w.monitors) {
        if (auto p = m.lock()) live.push_back(std::move(p));
      }
      previous = w.previous;
    }
  }
  if (!live.empty()) {
    // On another thread, with a deadline: a store call could wait on a lock that a thread
    // stopped by this abort holds. The other ranks see the published trace within their next
    // poll (kStallPoll in process_group.cpp) and publish theirs.
    struct Outcome {
      std::mutex mutex;
      bool done = false;
      std::vector<std::string> divergences;
    };
    auto out = std::make_shared<Outcome>();
    std::thread([live, why, out] {
      for (const auto& m : live) {
        auto d = m->publish_final("aborted in its backend (" + why + ")",
                                  std::chrono::milliseconds(1500));
        std::lock_guard<std::mutex> lock(out->mutex);
        if (d) out->divergences.push_back(*d);
      }
      std::lock_guard<std::mutex> lock(out->mutex);
      out->done = true;
    }).detach();
    bool done = false;
    for (int i = 0; i < 250 && !done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::lock_guard<std::mutex> lock(out->mutex);
      done = out->done;
    }
    std::lock_guard<std::mutex> lock(out->mutex);
    for (const auto& d : out->divergences) std::fprintf(stderr, "%s\n", d.c_str());
    if (out->divergences.empty()) {
      std::fprintf(stderr, "[dist] this process is aborting (%s)%s\n", why.c_str(),
                   done ? "; its collective trace was published for the other ranks"
                        : "; the store did not take its collective trace in time");
    }
    std::fflush(stderr);
  }
  if (previous != nullptr) previous();
  std::abort();
}

}  // namespace

void watch_abort(const std::shared_ptr<CollectiveMonitor>& monitor) {
  auto& w = abort_watch();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.monitors.erase(std::remove_if(w.monitors.begin(), w.monitors.end(),
                                  [](const auto& m) { return m.expired(); }),
                   w.monitors.end());
  w.monitors.push_back(monitor);
  if (!w.installed) {
    w.previous = std::set_terminate(publish_and_terminate);
    w.installed = true;
  }
}

std::vector<RankTrace> CollectiveMonitor::read_others() {
  std::vector<RankTrace> out;
  for (int k = 0; k < size_; ++k) {
    if (k == rank_) continue;
    const std::string key = trace_key(k);
    if (!store_->check({key})) continue;
    if (auto t = RankTrace::parse(text(store_->get(key)))) out.push_back(std::move(*t));
  }
  return out;
}

std::optional<std::string> CollectiveMonitor::divergence(bool force) {
  try {
    // Nothing was published or withdrawn since the last look: the answer has not changed.
    const int64_t version = store_->add(kVersionKey, 0);
    {
      std::lock_guard<std::mutex> lock(stall_mutex_);
      if (version == seen_version_ && !force) return std::nullopt;
      seen_version_ = version;
    }
    auto traces = read_others();
    if (traces.empty()) return std::nullopt;
    traces.push_back(own(stalled_on_));
    return first_divergence(group_, traces);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string CollectiveMonitor::store_note() {
  try {
    const std::string why = probe_store(store_, stall_after());
    return why.empty() ? std::string() : "; " + why;
  } catch (const std::exception&) {
    return {};
  }
}

std::string CollectiveMonitor::progress(uint64_t waiting) {
  // A frozen store host would make every read below wait the whole timeout: ask it first, briefly.
  const std::string note = store_note();
  std::vector<RankTrace> traces;
  try {
    traces = read_others();
  } catch (const std::exception&) {
  }
  std::vector<int> silent;
  for (int k = 0; k < size_; ++k) {
    if (k == rank_) continue;
    const int g = global_ranks_[k];
    if (std::none_of(traces.begin(), traces.end(), [&](const RankTrace& t) { return t.rank == g; })) {
      silent.push_back(g);
    }
  }
  traces.push_back(own(waiting));
  std::string s = describe_progress(traces);
  // A stopped store host publishes nothing and answers nothing: say so, it is the cause.
  s += note;
  if (!silent.empty()) {
    s += fmt::format(
        "; {} {} published no trace: not waiting on a collective of this group (busy "
        "elsewhere, stuck outside fsdpp's collectives, or dead)",
        silent.size() == 1 ? "rank" : "ranks", fmt::join(silent, ", "));
  }
  return s;
}

void CollectiveMonitor::verify(const CollectiveRecord& rec) {
  auto& store = *check_store_;
  store.set(check_key(rec.seq, rank_), bytes(RankTrace{global_ranks_[rank_], rec.seq, {rec}}.serialize()));
  std::vector<std::string> keys;
  for (int k = 0; k < size_; ++k) keys.push_back(check_key(rec.seq, k));
  try {
    store.wait(keys, timeout_);
  } catch (const std::exception&) {
    std::vector<std::string> missing;
    for (int k = 0; k < size_; ++k) {
      try {
        if (store.check({keys[k]})) continue;
        std::string last = "none checked yet";
        if (rec.seq > 1 && store.check({check_key(rec.seq - 1, k)})) {
          if (auto t = RankTrace::parse(text(store.get(check_key(rec.seq - 1, k))))) {
            if (!t->records.empty()) last = "#" + std::to_string(rec.seq - 1) + ", " + t->records[0].describe();
          }
        }
        missing.push_back(fmt::format("rank {} (its last: {})", global_ranks_[k], last));
      } catch (const std::exception&) {
        missing.push_back(fmt::format("rank {} (unreachable)", global_ranks_[k]));
      }
    }
    FSDPP_THROW(TimeoutError,
                "[dist] rank {} (group '{}'): FSDPP_COLLECTIVE_CHECK: {} did not reach "
                "collective #{} ({}) within {} ms: they stopped issuing collectives of this "
                "group, are behind, or died",
                global_ranks_[rank_], group_, fmt::join(missing, ", "), rec.seq, rec.describe(),
                timeout_.count());
  }
  std::vector<RankTrace> traces;
  for (int k = 0; k < size_; ++k) {
    if (auto t = RankTrace::parse(text(store.get(keys[k])))) traces.push_back(std::move(*t));
  }
  // Every rank has now finished the check before this one, so nobody reads that key again.
  if (rec.seq > 1) store.deleteKey(check_key(rec.seq - 1, rank_));
  if (auto d = first_divergence(group_, traces)) {
    FSDPP_THROW(CommError, "{} (found by FSDPP_COLLECTIVE_CHECK before it ran)", *d);
  }
}

}  // namespace fsdpp::dist::detail
