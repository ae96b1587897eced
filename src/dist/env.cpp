#include "fsdpp/dist/env.h"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/common/whole_number.h"

namespace fsdpp::dist {
namespace {

long long parse_int(std::string_view name, const std::string& value, long long lo, long long hi,
                    std::string_view accepted) {
  const auto parsed = parse_whole_number(value);
  FSDPP_CHECK_AS(ConfigError, parsed.has_value(),
                 "[dist] environment variable {}='{}' is not an integer; expected {}", name, value,
                 accepted);
  const long long out = *parsed;
  FSDPP_CHECK_AS(ConfigError, out >= lo && out <= hi,
                 "[dist] environment variable {}={} is out of range; expected {}", name, value,
                 accepted);
  return out;
}

}  // namespace

DistEnv DistEnv::from_lookup(
    const std::function<std::optional<std::string>(std::string_view)>& get) {
  DistEnv env;
  auto rank = get("RANK");
  auto world = get("WORLD_SIZE");
  if (auto t = get("FSDPP_TIMEOUT_S")) {
    env.timeout = std::chrono::seconds(
        parse_int("FSDPP_TIMEOUT_S", *t, 1, 24 * 3600, "whole seconds in [1, 86400]"));
  }
  if (!rank && !world) return env;  // not launched: one process
  FSDPP_CHECK_AS(ConfigError, rank && world,
                 "[dist] {} is set but {} is not; set both (fsdpp-run does) or neither",
                 rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK");
  env.launched = true;
  env.world_size = static_cast<int>(
      parse_int("WORLD_SIZE", *world, 1, 1 << 20, "a positive integer"));
  env.rank = static_cast<int>(parse_int("RANK", *rank, 0, env.world_size - 1,
                                        fmt::format("0 <= RANK < WORLD_SIZE={}", env.world_size)));
  env.local_world_size = env.world_size;
  env.local_rank = env.rank;
  if (auto v = get("LOCAL_WORLD_SIZE")) {
    env.local_world_size = static_cast<int>(parse_int(
        "LOCAL_WORLD_SIZE", *v, 1, env.world_size,
        fmt::format("1 <= LOCAL_WORLD_SIZE <= WORLD_SIZE={}", env.world_size)));
  }
  if (auto v = get("LOCAL_RANK")) {
    env.local_rank = static_cast<int>(
        parse_int("LOCAL_RANK", *v, 0, env.local_world_size - 1,
                  fmt::format("0 <= LOCAL_RANK < LOCAL_WORLD_SIZE={}", env.local_world_size)));
  } else {
    env.local_rank = env.rank % env.local_world_size;
  }
  if (auto v = get("MASTER_ADDR")) {
    FSDPP_CHECK_AS(ConfigError, !v->empty(),
                   "[dist] environment variable MASTER_ADDR is empty; expected a host name or IP");
    env.master_addr = *v;
  }
  if (auto v = get("MASTER_PORT")) {
    env.master_port =
        static_cast<int>(parse_int("MASTER_PORT", *v, 1, 65535, "a TCP port in [1, 65535]"));
  } else {
    FSDPP_CHECK_AS(ConfigError, env.world_size == 1,
                   "[dist] MASTER_PORT is not set but WORLD_SIZE={}; every rank needs the same "
                   "MASTER_ADDR and MASTER_PORT (fsdpp-run sets them)",
                   env.world_size);
  }
  if (auto v = get("FSDPP_AGENT_STORE")) env.agent_store = (*v == "1");
  return env;
}

DistEnv DistEnv::from_env() {
  return from_lookup([](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace fsdpp::dist
