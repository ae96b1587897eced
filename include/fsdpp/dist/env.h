#pragma once
// The torchrun-compatible environment a worker is started with.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace fsdpp::dist {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Every blocking wait (rendezvous, collectives) gives up after this long.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // FSDPP_AGENT_STORE=1: a launcher hosts the TCPStore and every worker is a client.
  bool agent_store = false;
  // False when no RANK/WORLD_SIZE variables were set: a single process, world size 1.
  bool launched = false;

  // Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
  // FSDPP_TIMEOUT_S and FSDPP_AGENT_STORE. Throws ConfigError naming the variable, its value and
  // what is accepted.
  static DistEnv from_env();
  // The same, from any lookup (tests use a map).
  static DistEnv from_lookup(const std::function<std::optional<std::string>(std::string_view)>& get);
};

}  // namespace fsdpp::dist
