#pragma once
// fsdpp-run's engine: start the local workers of a job, relay their output and supervise them.
// No LibTorch here: the launcher only starts and watches processes.

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/common/launch_env.h"

namespace fsdpp::launch {

// A failure of the launcher itself: a worker that cannot be started, a fork or pipe that fails.
// Messages start with "[fsdpp-run]". (Stands alone until fsdpp/common/error.h settles.)
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration the launcher refuses (fsdpp-run exits with kExitUsage on it).
class UsageError : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

// Exit codes of run() and fsdpp-run; a signal S that stopped the launcher gives 128 + S.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitWorkerFailed = 1;  // also: the launcher could not start a worker
inline constexpr int kExitUsage = 2;

// One field per fsdpp-run flag.
struct LaunchConfig {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // unset: a free port on 127.0.0.1 (single node only)
  // torchrun's --rdzv-id: every node must give the same (the launchers check); "" when not given.
  std::string rdzv_id;
  int max_restarts = 0;
  std::optional<std::filesystem::path> log_dir;  // also write rank<R>.log there
  int timeout_s = 300;                           // exported as FSDPP_TIMEOUT_S
  // --nnodes > 1 (docs/multi-node.md): how long the launchers wait for every node to arrive, and
  // how long one may stay silent before the others take it for dead.
  double rdzv_timeout_s = 300;
  double heartbeat_timeout_s = 5;
  double grace_s = 3.0;                          // SIGTERM -> SIGKILL delay when stopping workers
  // > 0: a worker whose heartbeat (FSDPP_HEARTBEAT_FILE, which fsdpp-train writes after every
  // step) is older than this counts as failed; 0: off. Counted from its first heartbeat.
  double progress_timeout_s = 0;
  bool prefix_output = true;                     // "[rank R] " before each relayed line
  std::vector<std::string> command;              // PROGRAM ARGS...; PROGRAM is looked up in PATH
};

// Throws UsageError naming the flag, what was given and what is accepted.
void validate(const LaunchConfig& config);

// The flags that say where this node is in the job, as given (unset: not given), in fsdpp-run's
// and torchrun's spellings. What they leave unset comes from the environment that started
// fsdpp-run: SLURM's srun (one fsdpp-run per node) or Kubeflow's PET_* variables (launch_env.h).
struct PlacementFlags {
  std::optional<int> nnodes, node_rank, nproc_per_node, master_port;
  std::optional<std::string> master_addr;
  std::optional<std::string> rdzv_backend;   // c10d or static: the launchers' own TCPStore
  std::optional<std::string> rdzv_endpoint;  // HOST[:PORT] (port 29400 when left out, as torchrun)
  std::optional<std::string> rdzv_id;
  bool standalone = false;  // one node on 127.0.0.1, a free port; the environment is not read
};

// Sets config's nnodes, node_rank, nproc_per_node, master_addr, master_port and rdzv_id from
// `flags` and `env`. Returns the line saying which environment was detected and what it gave
// (empty when the flags alone decided). Throws UsageError for flags that contradict each other or
// the environment, naming both.
std::string apply_placement(const PlacementFlags& flags, const EnvLookup& env, LaunchConfig& config);

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// The variables set for local worker `local_rank` on top of the launcher's own environment:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and NODE_RANK (both the node rank),
// GROUP_WORLD_SIZE (nnodes), MASTER_ADDR, MASTER_PORT, FSDPP_TIMEOUT_S, FSDPP_RESTART_COUNT,
// FSDPP_LAUNCHER=fsdpp-run (what init_from_env reads these variables as),
// FSDPP_AGENT_STORE=1 when --nnodes > 1 (node 0's launcher hosts the store), and
// OMP_NUM_THREADS=1 unless the launcher's environment already sets it.
EnvVars worker_env(const LaunchConfig& config, int master_port, int local_rank, int restart_count);

// A TCP port that was free on `host` a moment ago (bind to port 0, read it back, close).
int find_free_port(const std::string& host = "127.0.0.1");

// Validates `config`, starts the local workers and supervises them until all exit 0 (returns
// kExitSuccess), one fails and no restart is left (stops the others, returns kExitWorkerFailed),
// or the launcher receives SIGINT/SIGTERM/SIGHUP/SIGQUIT (forwards it, returns 128 + signal).
// With --nnodes > 1 it first meets the other nodes' launchers (a LaunchError names the nodes
// that did not arrive within rdzv_timeout_s), and a failure on any node stops every node
// (kExitWorkerFailed, naming the node).
// While it runs it blocks those signals and SIGCHLD in the calling thread and reads them from a
// signalfd, so the process must have no other thread that leaves them unblocked.
// Throws UsageError for a bad config and LaunchError when a worker cannot be started.
int run(const LaunchConfig& config);

}  // namespace fsdpp::launch
