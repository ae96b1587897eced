// fsdpp-run: start N workers of an fsdpp job on this node, torchrun-style. CLI glue only; the
// work is in fsdpp/launch/launcher.h.

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "fsdpp/launch/launcher.h"

namespace {

namespace launch = fsdpp::launch;

// Checks the syntax before CLI11 converts, so the message says what is accepted; ranges are
// checked by launch::validate(), which names the accepted range.
const CLI::Validator kInteger(
    [](std::string& text) -> std::string {
      int value = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec == std::errc::result_out_of_range) {
        return fmt::format("expects a whole number that fits in 32 bits, got '{}'", text);
      }
      if (ec != std::errc() || end != text.data() + text.size()) {
        return fmt::format("expects a whole number, got '{}'", text);
      }
      return {};
    },
    "");

// --nnodes N, or torchrun's MIN:MAX when MIN = MAX (a fixed size written as a range, such as
// 1:1), which it turns into N; an elastic range (1:4) is refused: a job here has a fixed size.
const CLI::Validator kNodeCount(
    [](std::string& text) -> std::string {
      if (const auto colon = text.find(':'); colon != std::string::npos) {
        const std::string low = text.substr(0, colon), high = text.substr(colon + 1);
        int a = 0, b = 0;
        const auto [ea, eca] = std::from_chars(low.data(), low.data() + low.size(), a);
        const auto [eb, ecb] = std::from_chars(high.data(), high.data() + high.size(), b);
        const bool numbers = eca == std::errc() && ecb == std::errc() &&
                             ea == low.data() + low.size() && eb == high.data() + high.size();
        if (!numbers || a != b) {
          return fmt::format("expects a whole number, or torchrun's MIN:MAX with MIN = MAX such as "
                             "2:2 (elastic ranges are not supported), got '{}'",
                             text);
        }
        text = low;
      }
      return kInteger(text);
    },
    "");

const CLI::Validator kSeconds(
    [](std::string& text) -> std::string {
      double value = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
        return fmt::format("expects a number of seconds such as 3 or 0.5, got '{}'", text);
      }
      return {};
    },
    "");

}  // namespace

int main(int argc, char** argv) {
  launch::LaunchConfig config;
  int master_port = 0;
  std::string log_dir;
  bool no_prefix = false;
  launch::PlacementFlags placement;
  std::string rdzv_backend, rdzv_endpoint, rdzv_id;

  CLI::App app{
      "Starts --nproc-per-node copies of PROGRAM on this node with RANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, FSDPP_TIMEOUT_S and "
      "FSDPP_RESTART_COUNT set, relays their output and stops all of them when one fails. With "
      "--nnodes > 1, run it on every node: the launchers meet at --master-addr:--master-port "
      "first, and a failure on any node stops them all (docs/multi-node.md). Under SLURM's srun "
      "(one per node) and in a Kubeflow PyTorchJob, the flags not given come from the job's "
      "environment (docs/slurm.md, docs/kubernetes.md).\n",
      "fsdpp-run"};
  // torchrun's spellings work too (--nproc_per_node=8, --master_addr, ...): the distillation
  // guide's launch commands run as written with fsdpp-run in torchrun's place.
  // CLI11 knows no trailing command: show it in the usage line.
  app.get_formatter()->label("OPTIONS", "OPTIONS] PROGRAM [ARGS...");
  app.footer(
      "Flags end at PROGRAM (or at --). Exit code: 0 when every worker exits 0, 1 when one "
      "fails or cannot be started, 2 for bad flags, 128+S when stopped by signal S.");
  app.add_option("--nproc-per-node,--nproc_per_node", config.nproc_per_node,
                 "Workers on this node")
      ->type_name("N")
      ->check(kInteger)
      ->capture_default_str();
  app.add_option("--nnodes", config.nnodes, "Nodes in the job (torchrun's N:N is N)")
      ->type_name("N")
      ->transform(kNodeCount)
      ->capture_default_str();
  app.add_option("--node-rank,--node_rank", config.node_rank,
                 "This node's index, 0 to nnodes-1")
      ->type_name("K")
      ->check(kInteger)
      ->capture_default_str();
  app.add_option("--master-addr,--master_addr", config.master_addr, "Address of rank 0's node")
      ->type_name("ADDR")
      ->capture_default_str();
  app.add_option("--master-port,--master_port", master_port,
                 "Port of rank 0's store (default on a single node: a free port)")
      ->type_name("PORT")
      ->check(kInteger);
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend,
                 "torchrun's: c10d (or static), the launchers' own TCPStore")
      ->type_name("NAME");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                 "torchrun's: HOST[:PORT] of the store, as --master-addr/--master-port (port 29400 "
                 "when left out)")
      ->type_name("HOST:PORT");
  app.add_option("--rdzv-id,--rdzv_id", rdzv_id, "torchrun's: the job's id; every node must give the same")
      ->type_name("ID");
  app.add_flag("--standalone", placement.standalone,
               "torchrun's: one node on 127.0.0.1 with a free port; the environment is not read");
  app.add_option("--max-restarts,--max_restarts", config.max_restarts,
                 "Restart all workers (of every node) this many times after a failure")
      ->type_name("N")
      ->check(kInteger)
      ->capture_default_str();
  app.add_option("--log-dir,--log_dir", log_dir,
                 "Also write each rank's output to DIR/rank<R>.log")
      ->type_name("DIR");
  app.add_option("--timeout-s", config.timeout_s,
                 "Rendezvous/collective timeout for workers (FSDPP_TIMEOUT_S)")
      ->type_name("S")
      ->check(kInteger)
      ->capture_default_str();
  app.add_option("--rdzv-timeout-s,--rdzv-timeout", config.rdzv_timeout_s,
                 "With --nnodes > 1: seconds to wait for every node's launcher to arrive")
      ->type_name("S")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--heartbeat-timeout-s", config.heartbeat_timeout_s,
                 "With --nnodes > 1: a node silent this long is taken for dead, and the job stops")
      ->type_name("S")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--progress-timeout-s", config.progress_timeout_s,
                 "A worker whose heartbeat (fsdpp-train: one per step) is older than this has "
                 "failed; 0: off")
      ->type_name("S")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--grace-s", config.grace_s, "Seconds between SIGTERM and SIGKILL")
      ->type_name("S")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_flag("--no-prefix", no_prefix, "Relay output lines without the '[rank R] ' prefix");
  // Everything from the first positional on is the worker's command line, its flags included.
  app.prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "--flag: 1 required N missing"; the flag is all that matters.
    const std::string what = e.what();
    fmt::print(stderr, "[fsdpp-run] {} needs a value; see fsdpp-run --help\n",
               what.substr(0, what.find(':')));
    return launch::kExitUsage;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    fmt::print(stderr, "[fsdpp-run] {}; see fsdpp-run --help\n", e.what());
    return launch::kExitUsage;
  }

  config.command = app.remaining();
  if (!config.command.empty() && config.command.front() == "--") {
    config.command.erase(config.command.begin());
  } else if (!config.command.empty() && config.command.front().starts_with("-")) {
    // prefix_command() hands an unknown flag over as if it were PROGRAM.
    fmt::print(stderr,
               "[fsdpp-run] unknown flag '{}'; see fsdpp-run --help (put -- before a PROGRAM "
               "whose name starts with '-')\n",
               config.command.front());
    return launch::kExitUsage;
  }
  if (!log_dir.empty()) config.log_dir = log_dir;
  config.prefix_output = !no_prefix;
  if (app.count("--nnodes") > 0) placement.nnodes = config.nnodes;
  if (app.count("--node-rank") > 0) placement.node_rank = config.node_rank;
  if (app.count("--nproc-per-node") > 0) placement.nproc_per_node = config.nproc_per_node;
  if (app.count("--master-addr") > 0) placement.master_addr = config.master_addr;
  if (app.count("--master-port") > 0) placement.master_port = master_port;
  if (app.count("--rdzv-backend") > 0) placement.rdzv_backend = rdzv_backend;
  if (app.count("--rdzv-endpoint") > 0) placement.rdzv_endpoint = rdzv_endpoint;
  if (app.count("--rdzv-id") > 0) placement.rdzv_id = rdzv_id;

  try {
    // One line on what the environment gave (SLURM's srun, Kubeflow), before anything starts.
    const std::string detected =
        launch::apply_placement(placement, fsdpp::process_environment(), config);
    if (!detected.empty()) fmt::print(stderr, "[fsdpp-run] {}\n", detected);
    return launch::run(config);
  } catch (const launch::UsageError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return launch::kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return launch::kExitWorkerFailed;
  }
}
