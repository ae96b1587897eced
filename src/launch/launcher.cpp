#include "fsdpp/launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "descendants.h"
#include "multi_node.h"
#include "pipe.h"
#include "signal_watch.h"
#include "worker_group.h"

namespace fsdpp::launch {
namespace {

// Each worker costs the launcher two pipe fds, and the default fd limit is 1024.
constexpr int kMaxProcPerNode = 256;
constexpr double kMaxGraceS = 3600;

void check_range(const char* flag, long long value, long long lo, long long hi) {
  if (value < lo || value > hi) {
    throw UsageError(
        fmt::format("[fsdpp-run] {} must be between {} and {}, got {}", flag, lo, hi, value));
  }
}

std::vector<WorkerSpec> worker_specs(const LaunchConfig& config, int master_port, int attempt) {
  std::vector<WorkerSpec> specs;
  for (int i = 0; i < config.nproc_per_node; ++i) {
    specs.push_back({config.node_rank * config.nproc_per_node + i, i, config.command,
                     worker_env(config, master_port, i, attempt)});
  }
  return specs;
}

// Why some workers needed SIGKILL: "after 3 s" or "at once on a second signal, SIGINT".
std::string kill_reason(const WorkerGroup::StopResult& stop, double grace_s) {
  if (stop.interrupt_signal != 0) {
    return fmt::format("at once on a second signal, {}", signal_name(stop.interrupt_signal));
  }
  return fmt::format("after {} s", grace_s);
}

void report_leftovers(const WorkerGroup::Leftovers& left) {
  if (left.groups > 0) {
    fmt::print(stderr, "[fsdpp-run] every worker exited 0; stopped the processes that {} of them "
               "left running in the background\n", left.groups);
  }
  if (left.outside > 0) {
    fmt::print(stderr, "[fsdpp-run] every worker exited 0; stopped {} process{} that left its "
               "worker's process group (setsid) and would have outlived the job\n", left.outside,
               left.outside == 1 ? "" : "es");
  }
}

}  // namespace

void validate(const LaunchConfig& config) {
  check_range("--nproc-per-node", config.nproc_per_node, 1, kMaxProcPerNode);
  check_range("--nnodes", config.nnodes, 1, 1 << 20);
  if (config.node_rank < 0 || config.node_rank >= config.nnodes) {
    throw UsageError(fmt::format(
        "[fsdpp-run] --node-rank must be between 0 and --nnodes - 1 = {}, got {}",
        config.nnodes - 1, config.node_rank));
  }
  if (config.master_addr.empty()) {
    throw UsageError("[fsdpp-run] --master-addr must be a host name or address, got ''");
  }
  if (config.master_port) check_range("--master-port", *config.master_port, 1, 65535);
  if (config.nnodes > 1 && !config.master_port) {
    throw UsageError(
        "[fsdpp-run] --master-port is required when --nnodes > 1: every node must be given "
        "the same port (1-65535)");
  }
  if (config.rdzv_id.size() > 128 ||
      config.rdzv_id.find_first_of(" \t\n\r") != std::string::npos) {
    throw UsageError(fmt::format("[fsdpp-run] --rdzv-id must be at most 128 characters without spaces, "
                                 "got '{}'", config.rdzv_id));
  }
  check_range("--max-restarts", config.max_restarts, 0, 1000);
  check_range("--timeout-s", config.timeout_s, 1, 7 * 24 * 3600);
  if (!(config.rdzv_timeout_s > 0 && config.rdzv_timeout_s <= 7 * 24 * 3600)) {
    throw UsageError(fmt::format(
        "[fsdpp-run] --rdzv-timeout-s must be more than 0 and at most {} seconds, got {}",
        7 * 24 * 3600, config.rdzv_timeout_s));
  }
  if (!(config.heartbeat_timeout_s >= 1 && config.heartbeat_timeout_s <= 3600)) {
    throw UsageError(fmt::format(
        "[fsdpp-run] --heartbeat-timeout-s must be between 1 and 3600 seconds, got {}",
        config.heartbeat_timeout_s));
  }
  if (!(config.progress_timeout_s >= 0 && config.progress_timeout_s <= 7 * 24 * 3600)) {
    throw UsageError(fmt::format(
        "[fsdpp-run] --progress-timeout-s must be between 0 (off) and {} seconds, got {}",
        7 * 24 * 3600, config.progress_timeout_s));
  }
  if (!(config.grace_s >= 0 && config.grace_s <= kMaxGraceS)) {  // also catches NaN
    throw UsageError(fmt::format("[fsdpp-run] --grace-s must be between 0 and {} seconds, got {}",
                                 kMaxGraceS, config.grace_s));
  }
  if (config.command.empty() || config.command.front().empty()) {
    throw UsageError(
        "[fsdpp-run] missing PROGRAM: usage is fsdpp-run [flags] PROGRAM [ARGS...]");
  }
}

EnvVars worker_env(const LaunchConfig& config, int master_port, int local_rank,
                   int restart_count) {
  EnvVars env{
      {"RANK", std::to_string(config.node_rank * config.nproc_per_node + local_rank)},
      {"WORLD_SIZE", std::to_string(config.nnodes * config.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node)},
      {"GROUP_RANK", std::to_string(config.node_rank)},
      {"NODE_RANK", std::to_string(config.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(config.nnodes)},
      {"MASTER_ADDR", config.master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {"FSDPP_TIMEOUT_S", std::to_string(config.timeout_s)},
      {"FSDPP_RESTART_COUNT", std::to_string(restart_count)},
      {"FSDPP_LAUNCHER", "fsdpp-run"},
  };
  // Node 0's launcher hosts the store on MASTER_ADDR:MASTER_PORT; the workers use it too.
  if (config.nnodes > 1) env.emplace_back("FSDPP_AGENT_STORE", "1");
  // As torchrun does: N workers each starting one OpenMP thread per core oversubscribe the node.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

int find_free_port(const std::string& host) {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (!sock || ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      ::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw LaunchError(fmt::format("[fsdpp-run] cannot find a free TCP port on '{}': {}", host,
                                  std::strerror(errno)));
  }
  return ntohs(addr.sin_port);
}

OutputOptions output_options(const LaunchConfig& config) {
  return {config.prefix_output, config.log_dir, std::chrono::seconds(2LL * config.timeout_s),
          std::chrono::milliseconds(std::llround(config.progress_timeout_s * 1000))};
}

int run(const LaunchConfig& config) {
  validate(config);
  // Picked once: every attempt's workers meet at the same address.
  const int master_port = config.master_port ? *config.master_port : find_free_port();
  if (config.log_dir) {
    std::error_code ec;
    std::filesystem::create_directories(*config.log_dir, ec);
    if (ec) {
      throw LaunchError(fmt::format("[fsdpp-run] cannot create --log-dir '{}': {}",
                                    config.log_dir->string(), ec.message()));
    }
  }
  const auto grace = std::chrono::milliseconds(std::llround(config.grace_s * 1000));

  SignalWatch signals;
  // Orphans of the workers (a setsid child whose worker exited) become ours, not init's, so
  // that the job stops them (descendants.h).
  become_subreaper();
  if (config.nnodes > 1) return run_multi_node(config, signals, grace);
  WorkerGroup group(signals, output_options(config));
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      fmt::print(stderr, "[fsdpp-run] restarting workers (attempt {} of {})\n", attempt + 1,
                 config.max_restarts + 1);
    }
    group.start(worker_specs(config, master_port, attempt));
    const WorkerGroup::WaitResult result = group.wait();

    if (result.outcome == WorkerGroup::Outcome::kSucceeded) {
      report_leftovers(group.stop_leftovers(grace));
      return kExitSuccess;
    }

    if (result.outcome == WorkerGroup::Outcome::kInterrupted) {
      fmt::print(stderr, "[fsdpp-run] received {}; forwarding it to {} worker(s)\n",
                 signal_name(result.signal), group.running());
      const WorkerGroup::StopResult stop = group.stop(result.signal, grace);
      if (stop.killed > 0) {
        fmt::print(stderr, "[fsdpp-run] sent SIGKILL to {} worker(s) {}\n", stop.killed,
                   kill_reason(stop, config.grace_s));
      }
      return 128 + result.signal;
    }

    const std::string stopped = group.stopped_note();
    const WorkerGroup::StopResult stop = group.stop(SIGTERM, grace);
    std::string killed;
    if (stop.killed > 0) {
      killed = fmt::format(" ({} with SIGKILL {})", stop.killed, kill_reason(stop, config.grace_s));
    }
    fmt::print(stderr, "[fsdpp-run] {}; stopped the other {} worker(s){}{}\n",
               result.failure->describe(),
               stop.signalled - (result.failure->still_running() ? 1 : 0), killed,
               result.failure->stopped_s > 0 ? "" : stopped);
    if (stop.interrupt_signal != 0) return 128 + stop.interrupt_signal;
    if (attempt >= config.max_restarts) return kExitWorkerFailed;
    if (result.failure->configuration_error()) {
      fmt::print(stderr, "[fsdpp-run] not restarting: exit code 2 is a usage or configuration error, which "
                         "the same command would meet again; fix it and start the job again\n");
      return kExitWorkerFailed;
    }
  }
}

}  // namespace fsdpp::launch
