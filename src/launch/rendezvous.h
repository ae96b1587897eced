#pragma once
// The launchers of a multi-node job meet before any worker starts: node 0's launcher hosts the
// job's store (c10d's TCPStore, store.h) on --master-addr:--master-port, every launcher
// announces itself there, and all wait until every node rank has arrived, with the same
// --nnodes and --nproc-per-node, within --rdzv-timeout-s. The store then stays up for the
// workers (FSDPP_AGENT_STORE=1) and for the launchers' liveness link (node_link.h).

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "signal_watch.h"
#include "store.h"

namespace fsdpp::launch {

struct RendezvousOptions {
  std::string master_addr;
  int master_port = 0;
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string rdzv_id;  // --rdzv-id: every node must give the same
  int max_restarts = 0;  // every node must give the same
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Bounds each store operation, so that a host that vanished mid-call cannot hang a launcher.
  std::chrono::milliseconds op_timeout{std::chrono::seconds(30)};
  // The launcher's signals: one (not SIGCHLD) ends the rendezvous. Null: none are watched.
  SignalWatch* signals = nullptr;
};

// What one launcher announced.
struct NodeInfo {
  int node_rank = 0;
  int nnodes = 0;
  int nproc_per_node = 0;
  std::string host;
  long pid = 0;
  std::string rdzv_id;
  int max_restarts = 0;
};

struct Rendezvous {
  std::unique_ptr<KeyValueStore> store;  // node 0: the host of the store; others: a client
  std::vector<NodeInfo> nodes;           // by node rank
};

// Store keys the launchers share (the workers' keys start with "fsdpp/").
namespace keys {
std::string node(int rank);      // "host=.. pid=.. nnodes=.. nproc=..", set on arrival
std::string claims(int rank);    // how many launchers arrived as this node rank
std::string heartbeat(int rank); // a counter each launcher increments while it runs
// Per round of workers (0, then one more after each restart, --max-restarts):
std::string state(int rank, int round);  // running | done | failed | stopped
std::string failed(int round);           // "<node>|<what>": the round's first failure
std::string arrived(int rank, int round);  // set by a node's launcher ready to start round > 0
inline constexpr const char* kRound = "fsdpp-run/round";  // the round the job is in
inline constexpr const char* kAbort = "fsdpp-run/abort";    // why the rendezvous failed
}  // namespace keys

// Blocks until every node has arrived. Returns std::nullopt when the launcher got a signal,
// which is then in *signal.
// Throws LaunchError naming the node ranks that did not arrive within the timeout (or node 0's
// store that could not be reached), or the nodes whose flags disagree.
std::optional<Rendezvous> rendezvous(const RendezvousOptions& options, int* signal);

}  // namespace fsdpp::launch
