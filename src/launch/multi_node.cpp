#include "multi_node.h"

#include <signal.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "node_link.h"
#include "rendezvous.h"
#include "worker_group.h"

namespace fsdpp::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After this node failed or stopped, how long it waits for the other nodes to notice: node 0
// keeps the store up for them meanwhile, and a silent node is told apart from a live one.
milliseconds settle_time(const LaunchConfig& config) {
  return milliseconds(std::llround(config.heartbeat_timeout_s * 1000)) + NodeLink::beat_interval() * 4;
}

std::string killed_note(const WorkerGroup::StopResult& stop, double grace_s) {
  if (stop.killed == 0) return "";
  if (stop.interrupt_signal != 0) {
    return fmt::format(" ({} with SIGKILL at once on a second signal, {})", stop.killed,
                       signal_name(stop.interrupt_signal));
  }
  return fmt::format(" ({} with SIGKILL after {} s)", stop.killed, grace_s);
}

// After this node's own failure: names the nodes whose launchers went silent, which is the
// likely cause (their workers died with them, and ours failed in a collective with them).
void report_gone_peers(const NodeLink& link, int self) {
  const auto peers = link.peers();
  for (int k = 0; k < static_cast<int>(peers.size()); ++k) {
    if (k != self && peers[k].gone) {
      fmt::print(stderr,
                 "[fsdpp-run] node {}'s launcher is not responding (no heartbeat for {:.1f} s): "
                 "it was killed, or its host is down or unreachable\n",
                 k, peers[k].silent_s);
    }
  }
}


// How one round of workers ended: the launcher exits with `code`, or the round failed (a worker
// here or elsewhere) and the workers are stopped; `first_is_mine`: this node's failure was the
// round's first, and `interrupt`: a signal cut the stop short.
struct RoundEnd {
  enum Kind { kExit, kFailed } kind = kExit;
  int code = 0;
  bool first_is_mine = false;
  int interrupt = 0;
};

// Why the job cannot restart after a failed round ("" when it can; "-" when there is nothing to
// say: no --max-restarts).
std::string why_no_restart(const LaunchConfig& config, const NodeLink& link) {
  if (config.max_restarts == 0) return "-";
  if (link.round() >= config.max_restarts) {
    return fmt::format("the last of --max-restarts {} restarts failed too", config.max_restarts);
  }
  const auto peers = link.peers();
  for (int k = 0; k < config.nnodes; ++k) {
    if (k != config.node_rank && peers[k].state == NodeLink::State::kDone) {
      return fmt::format("node {}'s workers had already finished", k);
    }
  }
  return "";
}

// A failed round that is not restarted: wait for the other nodes to stop (node 0 keeps the store
// up for them meanwhile) and name a node that went silent.
int finish_failed(const LaunchConfig& config, NodeLink& link, SignalWatch& signals, const RoundEnd& end) {
  link.wait_for_peers(Clock::now() + settle_time(config), signals, false);
  if (end.first_is_mine) report_gone_peers(link, config.node_rank);
  if (end.interrupt != 0) return 128 + end.interrupt;
  return kExitWorkerFailed;
}

RoundEnd run_round(const LaunchConfig& config, NodeLink& link, WorkerGroup& group, SignalWatch& signals,
                   milliseconds grace, const std::vector<WorkerSpec>& specs) {
  const int self = config.node_rank;
  try {
    group.start(specs);
  } catch (const LaunchError& e) {
    link.report_failure(fmt::format("node {} could not start its workers: {}", self, e.what()));
    link.set_state(NodeLink::State::kFailed);
    throw;
  }
  const WorkerGroup::WaitResult result = group.wait();
  const auto settle_deadline = [&] { return Clock::now() + settle_time(config); };

  switch (result.outcome) {
    case WorkerGroup::Outcome::kSucceeded: {
      if (const auto left = group.stop_leftovers(grace); left.groups + left.outside > 0) {
        fmt::print(stderr, "[fsdpp-run] node {}: every worker exited 0; stopped the processes "
                   "that {} of them left running in the background\n", self,
                   left.groups + left.outside);
      }
      link.set_state(NodeLink::State::kDone);
      if (self != 0) return {RoundEnd::kExit, kExitSuccess};
      // Node 0 hosts the store: it stays until every other node is done with it.
      if (const int s = link.wait_for_peers(std::nullopt, signals, false).signal; s != 0) {
        link.report_failure(fmt::format("node 0's launcher received {} while waiting for the "
                                        "other nodes to finish", signal_name(s)));
        fmt::print(stderr, "[fsdpp-run] node 0: received {} while waiting for the other nodes "
                           "to finish\n", signal_name(s));
        return {RoundEnd::kExit, 128 + s};
      }
      const std::string why = link.verdict();
      if (!why.empty()) {
        fmt::print(stderr, "[fsdpp-run] node 0's workers finished, but the job failed: {}\n", why);
        return {RoundEnd::kExit, kExitWorkerFailed};
      }
      const auto peers = link.peers();
      for (int k = 1; k < config.nnodes; ++k) {
        if (peers[k].state != NodeLink::State::kDone) {
          fmt::print(stderr, "[fsdpp-run] node 0's workers finished, but node {} ended {}\n", k,
                     to_string(peers[k].state));
          return {RoundEnd::kExit, kExitWorkerFailed};
        }
      }
      return {RoundEnd::kExit, kExitSuccess};
    }

    case WorkerGroup::Outcome::kInterrupted: {
      link.report_failure(
          fmt::format("node {}'s launcher received {}", self, signal_name(result.signal)));
      fmt::print(stderr, "[fsdpp-run] node {}: received {}; forwarding it to {} worker(s)\n", self,
                 signal_name(result.signal), group.running());
      const WorkerGroup::StopResult stop = group.stop(result.signal, grace);
      if (stop.killed > 0) {
        fmt::print(stderr, "[fsdpp-run] sent SIGKILL to {} worker(s){}\n", stop.killed,
                   killed_note(stop, config.grace_s));
      }
      link.set_state(NodeLink::State::kStopped);
      if (self == 0) link.wait_for_peers(settle_deadline(), signals, false);
      return {RoundEnd::kExit, 128 + result.signal};
    }

    case WorkerGroup::Outcome::kWorkerFailed: {
      const std::string mine = fmt::format("node {}: {}", self, result.failure->describe());
      const std::string first = link.report_failure(mine);
      const WorkerGroup::StopResult stop = group.stop(SIGTERM, grace);
      link.set_state(NodeLink::State::kFailed);
      fmt::print(stderr, "[fsdpp-run] {}; stopped the other {} worker(s) of this node{}\n", mine,
                 stop.signalled - (result.failure->still_running() ? 1 : 0),
                 killed_note(stop, config.grace_s));
      if (first != mine) {
        fmt::print(stderr, "[fsdpp-run] the job had already failed elsewhere: {}\n", first);
      }
      if (stop.interrupt_signal != 0) return {RoundEnd::kExit, 128 + stop.interrupt_signal};
      return {RoundEnd::kFailed, kExitWorkerFailed, first == mine, 0};
    }

    case WorkerGroup::Outcome::kExternal: {
      const std::string why = link.verdict();
      const WorkerGroup::StopResult stop = group.stop(SIGTERM, grace);
      link.set_state(NodeLink::State::kStopped);
      fmt::print(stderr, "[fsdpp-run] node {}: the job failed on another node: {}; stopped this "
                         "node's {} worker(s){}\n",
                 self, why, stop.signalled, killed_note(stop, config.grace_s));
      if (stop.interrupt_signal != 0) return {RoundEnd::kExit, 128 + stop.interrupt_signal};
      return {RoundEnd::kFailed, kExitWorkerFailed, false, 0};
    }
  }
  return {RoundEnd::kExit, kExitWorkerFailed};
}

}  // namespace

int run_multi_node(const LaunchConfig& config, SignalWatch& signals, milliseconds grace) {
  const int self = config.node_rank;
  const std::string where = fmt::format("{}:{}", config.master_addr, *config.master_port);
  const auto heartbeat_timeout = milliseconds(std::llround(config.heartbeat_timeout_s * 1000));

  RendezvousOptions ro;
  ro.master_addr = config.master_addr;
  ro.master_port = *config.master_port;
  ro.nnodes = config.nnodes;
  ro.node_rank = self;
  ro.nproc_per_node = config.nproc_per_node;
  ro.rdzv_id = config.rdzv_id;
  ro.max_restarts = config.max_restarts;
  ro.timeout = milliseconds(std::llround(config.rdzv_timeout_s * 1000));
  ro.op_timeout = std::max(heartbeat_timeout * 2, milliseconds{5000});
  ro.signals = &signals;
  int signal = 0;
  std::optional<Rendezvous> joined = rendezvous(ro, &signal);
  if (!joined) {
    fmt::print(stderr, "[fsdpp-run] node {}: received {} during the rendezvous; no worker was "
                       "started\n", self, signal_name(signal));
    return 128 + signal;
  }
  std::vector<std::string> hosts;
  for (const NodeInfo& n : joined->nodes) hosts.push_back(fmt::format("{}:{}", n.node_rank, n.host));
  const int first_rank = self * config.nproc_per_node;
  fmt::print(stderr, "[fsdpp-run] node {}: {} nodes joined at {} (node:host {}); starting ranks "
                     "{}-{} of {}\n",
             self, config.nnodes, where, fmt::join(hosts, " "), first_rank,
             first_rank + config.nproc_per_node - 1, config.nnodes * config.nproc_per_node);

  NodeLink::Options lo;
  lo.node_rank = self;
  lo.nnodes = config.nnodes;
  lo.where = where;
  lo.heartbeat_timeout = heartbeat_timeout;
  NodeLink link(std::move(*joined), lo);

  WorkerGroup group(signals, output_options(config));
  group.watch(link.fd());
  for (int round = 0;; round = link.round()) {
    std::vector<WorkerSpec> specs;
    for (int i = 0; i < config.nproc_per_node; ++i) {
      specs.push_back({first_rank + i, i, config.command,
                       worker_env(config, *config.master_port, i, /*restart_count=*/round)});
    }
    switch (const RoundEnd end = run_round(config, link, group, signals, grace, specs); end.kind) {
      case RoundEnd::kExit: return end.code;
      case RoundEnd::kFailed: {
        if (const std::string why = why_no_restart(config, link); !why.empty()) {
          if (!why.starts_with("-")) fmt::print(stderr, "[fsdpp-run] node {}: no restart: {}\n", self, why);
          return finish_failed(config, link, signals, end);
        }
        const NodeLink::RestartResult next =
            link.meet_for_restart(milliseconds(std::llround(config.rdzv_timeout_s * 1000)), signals);
        if (next.signal != 0) {
          fmt::print(stderr, "[fsdpp-run] node {}: received {} while the nodes met to restart\n", self,
                     signal_name(next.signal));
          return 128 + next.signal;
        }
        if (!next.error.empty()) {
          fmt::print(stderr, "[fsdpp-run] node {}: {}; the job ends\n", self, next.error);
          return kExitWorkerFailed;
        }
        link.begin_round(next.round);
        fmt::print(stderr, "[fsdpp-run] node {}: every node is back; restarting the workers of every node "
                           "(attempt {} of {})\n",
                   self, next.round + 1, config.max_restarts + 1);
        break;
      }
    }
  }
}

}  // namespace fsdpp::launch