#include "rendezvous.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdpp/launch/launcher.h"
#include "pipe.h"

namespace fsdpp::launch {

namespace keys {
std::string node(int rank) { return fmt::format("fsdpp-run/node/{}", rank); }
std::string claims(int rank) { return fmt::format("fsdpp-run/claims/{}", rank); }
std::string heartbeat(int rank) { return fmt::format("fsdpp-run/heartbeat/{}", rank); }
std::string state(int rank, int round) { return fmt::format("fsdpp-run/round/{}/state/{}", round, rank); }
std::string failed(int round) { return fmt::format("fsdpp-run/round/{}/failed", round); }
std::string arrived(int rank, int round) {
  return fmt::format("fsdpp-run/round/{}/arrived/{}", round, rank);
}
}  // namespace keys

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a waiting launcher looks at the store again: arrival shows within this.
constexpr milliseconds kPollInterval{100};
// One TCP connection attempt to node 0's store port waits at most this long.
constexpr milliseconds kConnectAttempt{1000};

int left_ms(Clock::time_point deadline, milliseconds cap) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp(left, milliseconds{0}, cap).count());
}

// Sleeps up to `ms`; returns a signal the launcher got meanwhile (0: none).
int signal_within(SignalWatch* signals, int ms) {
  if (signals == nullptr) {
    ::usleep(static_cast<useconds_t>(ms) * 1000);
    return 0;
  }
  return signals->wait_for_signal(milliseconds{ms});
}

enum class PortWait { kOpen, kInterrupted, kTimedOut };

// Waits until something accepts TCP connections on host:port: node 0's launcher may start after
// this one. c10d's own client retries too, but it cannot be interrupted by a signal, and each of
// its failed attempts takes its whole timeout.
PortWait wait_for_port(const std::string& host, int port, Clock::time_point deadline,
                       SignalWatch* signals, int* signal, std::string* last_error) {
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0) {
      *last_error = fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc));
    }
    for (addrinfo* ai = rc == 0 ? found : nullptr; ai != nullptr; ai = ai->ai_next) {
      UniqueFd sock(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                             ai->ai_protocol));
      if (!sock) continue;
      int error = 0;
      if (::connect(sock.get(), ai->ai_addr, ai->ai_addrlen) != 0) error = errno;
      if (error == EINPROGRESS) {
        // A signal waits for the end of this attempt (at most kConnectAttempt).
        pollfd p{sock.get(), POLLOUT, 0};
        const int n = ::poll(&p, 1, left_ms(deadline, kConnectAttempt));
        error = ETIMEDOUT;
        if (n > 0) {
          socklen_t len = sizeof error;
          ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &error, &len);
        }
      }
      if (error == 0) {
        ::freeaddrinfo(found);
        return PortWait::kOpen;
      }
      *last_error = std::strerror(error);
    }
    if (found != nullptr) ::freeaddrinfo(found);
    if (Clock::now() >= deadline) return PortWait::kTimedOut;
    if ((*signal = signal_within(signals, left_ms(deadline, milliseconds{200}))) != 0) {
      return PortWait::kInterrupted;
    }
  }
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

std::string describe(const NodeInfo& n) {
  return fmt::format("nnodes={} nproc={} pid={} host={} restarts={} id={}", n.nnodes, n.nproc_per_node,
                     n.pid, n.host, n.max_restarts, n.rdzv_id);
}

NodeInfo parse_info(int rank, const std::string& text) {
  NodeInfo info;
  info.node_rank = rank;
  std::istringstream in(text);
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = field.substr(0, eq);
    const std::string value = field.substr(eq + 1);
    long number = 0;
    std::from_chars(value.data(), value.data() + value.size(), number);
    if (key == "nnodes") info.nnodes = static_cast<int>(number);
    if (key == "nproc") info.nproc_per_node = static_cast<int>(number);
    if (key == "pid") info.pid = number;
    if (key == "host") info.host = value;
    if (key == "id") info.rdzv_id = value;
    if (key == "restarts") info.max_restarts = static_cast<int>(number);
  }
  return info;
}

std::string first_line(std::string text) {
  if (auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return text;
}

// The same conclusion on every node, from the same announcements: empty when they agree.
std::string disagreement(const RendezvousOptions& o, const std::vector<NodeInfo>& nodes,
                         const std::vector<std::string>& claims) {
  for (int k = 0; k < o.nnodes; ++k) {
    if (claims[k] != "1") {
      return fmt::format(
          "node rank {} was claimed by {} launchers (last on host {}); give each node its own "
          "--node-rank",
          k, claims[k], nodes[k].host);
    }
  }
  for (const NodeInfo& n : nodes) {
    if (n.nnodes != o.nnodes || n.nproc_per_node != nodes[0].nproc_per_node) {
      return fmt::format(
          "the nodes disagree: node 0 has --nnodes {} --nproc-per-node {}, node {} (host {}) "
          "has --nnodes {} --nproc-per-node {}; every node must be given the same",
          nodes[0].nnodes, nodes[0].nproc_per_node, n.node_rank, n.host, n.nnodes,
          n.nproc_per_node);
    }
    if (n.max_restarts != nodes[0].max_restarts) {
      return fmt::format("the nodes disagree: node 0 has --max-restarts {}, node {} (host {}) has {}; every "
                         "node must be given the same (they restart together)",
                         nodes[0].max_restarts, n.node_rank, n.host, n.max_restarts);
    }
    if (n.rdzv_id != nodes[0].rdzv_id) {
      return fmt::format("the nodes disagree: node 0 has --rdzv-id '{}', node {} (host {}) has '{}'; "
                         "every node of one job must be given the same",
                         nodes[0].rdzv_id, n.node_rank, n.host, n.rdzv_id);
    }
  }
  return {};
}

}  // namespace

std::optional<Rendezvous> rendezvous(const RendezvousOptions& o, int* signal) {
  *signal = 0;
  const auto start = Clock::now();
  const auto deadline = start + o.timeout;
  const double timeout_s = std::chrono::duration<double>(o.timeout).count();
  const std::string where = fmt::format("{}:{}", o.master_addr, o.master_port);

  Rendezvous out;
  StoreOptions so;
  so.host = o.master_addr;
  so.port = o.master_port;
  so.timeout = o.op_timeout;
  if (o.node_rank == 0) {
    so.is_server = true;
    try {
      out.store = open_store(so);
      // Exists before anyone arrives, so that the liveness link can read it without waiting.
      out.store->set(keys::failed(0), "");
      out.store->set(keys::kRound, "0");
    } catch (const LaunchError&) {
      throw;
    } catch (const std::exception& e) {
      throw LaunchError(fmt::format(
          "[fsdpp-run] node 0 cannot host the job's store on {} (--master-addr/--master-port): "
          "{}; is the port taken (by another job?) and is {} an address of this host?",
          where, first_line(e.what()), o.master_addr));
    }
  } else {
    std::string why = "no answer";
    switch (wait_for_port(o.master_addr, o.master_port, deadline, o.signals, signal, &why)) {
      case PortWait::kInterrupted: return std::nullopt;
      case PortWait::kTimedOut:
        throw LaunchError(fmt::format(
            "[fsdpp-run] node {}: rendezvous timed out after {} s: node rank 0 did not arrive "
            "(its store at {} cannot be reached: {}); is fsdpp-run --node-rank 0 running there "
            "with --master-port {}, and is {} reachable from this host? (--rdzv-timeout-s "
            "waits longer)",
            o.node_rank, timeout_s, where, why, o.master_port, o.master_addr));
      case PortWait::kOpen: break;
    }
    try {
      out.store = open_store(so);
    } catch (const LaunchError&) {
      throw;
    } catch (const std::exception& e) {
      throw LaunchError(fmt::format("[fsdpp-run] node {}: cannot connect to node 0's store at "
                                    "{}: {}",
                                    o.node_rank, where, first_line(e.what())));
    }
  }

  KeyValueStore& store = *out.store;
  NodeInfo self{o.node_rank, o.nnodes, o.nproc_per_node, host_name(), static_cast<long>(::getpid()),
                o.rdzv_id, o.max_restarts};
  std::vector<std::string> node_keys;
  for (int k = 0; k < o.nnodes; ++k) node_keys.push_back(keys::node(k));
  try {
    store.add(keys::claims(o.node_rank), 1);
    store.set(keys::state(o.node_rank, 0), "running");
    store.add(keys::heartbeat(o.node_rank), 0);
    store.set(keys::node(o.node_rank), describe(self));  // last: it means "arrived"

    const std::string hint =
        "start fsdpp-run on every node with the same --nnodes, --master-addr and --master-port "
        "(--rdzv-timeout-s waits longer)";
    for (;;) {
      if (store.check(node_keys)) break;
      if (store.check({keys::kAbort})) {
        throw LaunchError(fmt::format("[fsdpp-run] node {}: rendezvous at {} failed: {}",
                                      o.node_rank, where, store.get(keys::kAbort)));
      }
      if (Clock::now() >= deadline) {
        std::vector<int> missing, arrived;
        for (int k = 0; k < o.nnodes; ++k) {
          (store.check({node_keys[k]}) ? arrived : missing).push_back(k);
        }
        // The first node to give up tells the others why, so that every node that did arrive
        // names the missing ones (rather than a store that vanished with node 0).
        const std::string why = store.compare_set(
            keys::kAbort, "",
            fmt::format("timed out after {} s: node rank(s) {} of {} did not arrive (arrived: {}); {}",
                        timeout_s, fmt::join(missing, ", "), o.nnodes, fmt::join(arrived, ", "),
                        hint));
        if (o.node_rank == 0) signal_within(o.signals, 3 * kPollInterval.count());
        throw LaunchError(
            fmt::format("[fsdpp-run] node {}: rendezvous at {} failed: {}", o.node_rank, where, why));
      }
      if ((*signal = signal_within(o.signals, left_ms(deadline, kPollInterval))) != 0) {
        return std::nullopt;
      }
    }

    const std::vector<std::string> infos = store.multi_get(node_keys);
    std::vector<std::string> claim_keys;
    for (int k = 0; k < o.nnodes; ++k) claim_keys.push_back(keys::claims(k));
    const std::vector<std::string> claims = store.multi_get(claim_keys);
    for (int k = 0; k < o.nnodes; ++k) out.nodes.push_back(parse_info(k, infos[k]));
    if (const std::string why = disagreement(o, out.nodes, claims); !why.empty()) {
      store.set(keys::kAbort, why);  // so that a node waiting for more nodes stops too
      if (o.node_rank == 0) signal_within(o.signals, 3 * kPollInterval.count());
      throw LaunchError(
          fmt::format("[fsdpp-run] node {}: rendezvous at {} failed: {}", o.node_rank, where, why));
    }
  } catch (const LaunchError&) {
    throw;
  } catch (const std::exception& e) {
    throw LaunchError(fmt::format(
        "[fsdpp-run] node {}: lost node 0's store at {} during the rendezvous ({}): node 0's "
        "launcher exited; its output says why",
        o.node_rank, where, first_line(e.what())));
  }
  return out;
}

}  // namespace fsdpp::launch
