#include "node_link.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "fsdpp/launch/launcher.h"

namespace fsdpp::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Ten beats fit in the default 5 s heartbeat timeout: a launcher that is merely slow (a loaded
// machine) is not taken for dead.
constexpr milliseconds kBeat{500};

NodeLink::State parse_state(const std::string& s) {
  if (s == "done") return NodeLink::State::kDone;
  if (s == "failed") return NodeLink::State::kFailed;
  if (s == "stopped") return NodeLink::State::kStopped;
  return NodeLink::State::kRunning;
}

long long parse_count(const std::string& s) {
  long long v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// kFailed holds "<node>|<what>".
std::pair<int, std::string> parse_failure(const std::string& value) {
  const auto bar = value.find('|');
  if (bar == std::string::npos) return {-1, value};
  return {static_cast<int>(parse_count(value.substr(0, bar))), value.substr(bar + 1)};
}

std::string first_line(std::string text) {
  if (auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return text;
}

}  // namespace

const char* to_string(NodeLink::State state) {
  switch (state) {
    case NodeLink::State::kRunning: return "running";
    case NodeLink::State::kDone: return "done";
    case NodeLink::State::kFailed: return "failed";
    case NodeLink::State::kStopped: return "stopped";
  }
  return "?";
}

milliseconds NodeLink::beat_interval() { return kBeat; }

NodeLink::NodeLink(Rendezvous rendezvous, Options options)
    : options_(std::move(options)), rdzv_(std::move(rendezvous)) {
  event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event_) {
    throw LaunchError(fmt::format("[fsdpp-run] cannot create an eventfd: {}", std::strerror(errno)));
  }
  // The thread's own connection: a call of the main thread never waits behind a heartbeat.
  StoreOptions so;
  const auto colon = options_.where.rfind(':');
  so.host = options_.where.substr(0, colon);
  so.port = static_cast<int>(parse_count(options_.where.substr(colon + 1)));
  so.timeout = std::max(options_.heartbeat_timeout, milliseconds{2000});
  try {
    thread_store_ = open_store(so);
  } catch (const LaunchError&) {
    throw;
  } catch (const std::exception& e) {
    throw LaunchError(fmt::format("[fsdpp-run] node {}: cannot open a second connection to the "
                                  "store at {}: {}",
                                  options_.node_rank, options_.where, first_line(e.what())));
  }
  peers_.resize(options_.nnodes);
  last_beats_.assign(options_.nnodes, 0);
  last_change_.assign(options_.nnodes, Clock::now());
  // Blocked signals are inherited: the thread never takes the launcher's signals from signalfd.
  thread_ = std::thread([this] { loop(); });
}

NodeLink::~NodeLink() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string NodeLink::verdict() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return verdict_;
}

std::vector<NodeLink::Peer> NodeLink::peers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peers_;
}

void NodeLink::set_verdict(const std::string& why, int round) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!verdict_.empty() || round != round_) return;
    verdict_ = why;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_.get(), &one, sizeof one);
}

std::string NodeLink::report_failure(const std::string& what) {
  const std::string mine = fmt::format("{}|{}", options_.node_rank, what);
  try {
    return parse_failure(rdzv_.store->compare_set(keys::failed(round()), "", mine)).second;
  } catch (const std::exception&) {
    return what;
  }
}

void NodeLink::set_state(State state) {
  try {
    rdzv_.store->set(keys::state(options_.node_rank, round()), to_string(state));
  } catch (const std::exception&) {
    // The store is gone: the others learn of this node through its silence instead.
  }
}

void NodeLink::loop() {
  for (;;) {
    try {
      beat();
    } catch (const std::exception&) {
      return;  // the store is gone and beat() said so in the verdict: nothing left to watch
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, kBeat, [this] { return stopping_; })) return;
  }
}

void NodeLink::beat() {
  const int n = options_.nnodes;
  const int self = options_.node_rank;
  const int round = this->round();
  std::vector<std::string> names;
  for (int k = 0; k < n; ++k) names.push_back(keys::heartbeat(k));
  std::vector<std::string> values;
  try {
    thread_store_->add(keys::heartbeat(self), 1);
    values = thread_store_->multi_get(names);
    // A round's keys exist once its nodes arrive: read those there are.
    for (int k = 0; k < n; ++k) {
      const std::string key = keys::state(k, round);
      values.push_back(thread_store_->check({key}) ? thread_store_->get(key) : "running");
    }
    values.push_back(thread_store_->check({keys::failed(round)}) ? thread_store_->get(keys::failed(round)) : "");
  } catch (const std::exception& e) {
    if (self != 0) {
      set_verdict(fmt::format(
          "lost node 0's launcher, which hosts the job's store at {} ({}): it was stopped or "
          "killed, or its host is unreachable",
          options_.where, first_line(e.what())), this->round());
    } else {
      set_verdict(fmt::format("the job's store on this node stopped answering: {}",
                              first_line(e.what())), this->round());
    }
    throw;
  }

  const auto now = Clock::now();
  const double timeout_s = std::chrono::duration<double>(options_.heartbeat_timeout).count();
  std::string gone_message;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (round != round_) return;  // a new round began meanwhile: these are the old one's
    for (int k = 0; k < n; ++k) {
      if (k == self) continue;
      const long long beats = parse_count(values[k]);
      if (beats != last_beats_[k]) {
        last_beats_[k] = beats;
        last_change_[k] = now;
      }
      Peer& p = peers_[k];
      p.state = parse_state(values[n + k]);
      p.silent_s = std::chrono::duration<double>(now - last_change_[k]).count();
      p.gone = p.state == State::kRunning && p.silent_s > timeout_s;
      if (p.gone && gone_message.empty()) {
        gone_message = fmt::format(
            "node {}'s launcher stopped responding: no heartbeat for {:.1f} s (more than "
            "--heartbeat-timeout-s {}); it was killed, or its host is down or unreachable",
            k, p.silent_s, timeout_s);
      }
    }
  }
  const auto [failed_node, what] = parse_failure(values.back());
  if (!what.empty() && failed_node != self) {
    set_verdict(what, round);
  } else if (!gone_message.empty()) {
    // Recorded as the job's failure, so that every node gives the same reason.
    std::string first = gone_message;
    try {
      first = parse_failure(thread_store_->compare_set(
          keys::failed(round), "", fmt::format("{}|{}", self, gone_message))).second;
    } catch (const std::exception&) {
    }
    set_verdict(first, round);
  }
}

int NodeLink::round() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return round_;
}

void NodeLink::begin_round(int round) {
  std::lock_guard<std::mutex> lock(mutex_);
  round_ = round;
  verdict_.clear();
  for (Peer& p : peers_) p.state = State::kRunning;
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(event_.get(), &count, sizeof count);  // drain: not readable
}

NodeLink::RestartResult NodeLink::meet_for_restart(milliseconds timeout, SignalWatch& signals) {
  const int self = options_.node_rank;
  const int current = round();
  const auto deadline = Clock::now() + timeout;
  // A launcher silent past the heartbeat timeout is gone whatever its last state said.
  const auto silent = [&](int k) {
    return peers()[k].silent_s > std::chrono::duration<double>(options_.heartbeat_timeout).count();
  };
  RestartResult out;
  try {
    // Every node of the failed round asks to move from it to the next; the first does.
    const std::string now = rdzv_.store->compare_set(keys::kRound, std::to_string(current),
                                                     std::to_string(current + 1));
    out.round = static_cast<int>(parse_count(now));
    if (out.round != current + 1) {
      out.error = fmt::format("the job's store says round {}, this node finished round {}", out.round, current);
      return out;
    }
    rdzv_.store->set(keys::state(self, out.round), "running");
    rdzv_.store->set(keys::arrived(self, out.round), "1");
    std::vector<std::string> names;
    for (int k = 0; k < options_.nnodes; ++k) names.push_back(keys::arrived(k, out.round));
    for (;;) {
      std::vector<int> missing, gone;
      for (int k = 0; k < options_.nnodes; ++k) {
        if (rdzv_.store->check({names[k]})) continue;
        missing.push_back(k);
        if (silent(k)) gone.push_back(k);
      }
      if (missing.empty()) return out;
      const double timeout_s = std::chrono::duration<double>(timeout).count();
      if (!gone.empty() || Clock::now() >= deadline) {
        std::string why;
        for (int k : missing) {
          const Peer p = peers()[k];
          why += fmt::format("{}node {} ({})", why.empty() ? "" : "; ", k,
                             silent(k) ? fmt::format("its launcher is gone: no heartbeat for {:.1f} s", p.silent_s)
                                    : fmt::format("not back within --rdzv-timeout-s {}", timeout_s));
        }
        out.error = fmt::format("restart {} of the job: {} did not come back: {}", out.round,
                                missing.size() == 1 ? "a node" : "nodes", why);
        return out;
      }
      if (const int s = signals.wait_for_signal(milliseconds{100}); s != 0) {
        out.signal = s;
        return out;
      }
    }
  } catch (const std::exception& e) {
    out.error = fmt::format("lost the job's store at {} while the nodes met to restart: {}", options_.where,
                            first_line(e.what()));
    return out;
  }
}

NodeLink::WaitResult NodeLink::wait_for_peers(std::optional<Clock::time_point> deadline,
                                              SignalWatch& signals, bool stop_on_verdict) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bool settled = true;
      for (int k = 0; k < options_.nnodes; ++k) {
        if (k == options_.node_rank) continue;
        settled = settled && (peers_[k].state != State::kRunning || peers_[k].gone);
      }
      if (settled) return {true, 0};
      if (stop_on_verdict && !verdict_.empty()) return {false, 0};
    }
    milliseconds wait{100};
    if (deadline) {
      const auto left = std::chrono::duration_cast<milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) return {false, 0};
      wait = std::min(wait, left);
    }
    if (const int s = signals.wait_for_signal(wait); s != 0) return {false, s};
  }
}

}  // namespace fsdpp::launch
