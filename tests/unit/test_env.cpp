#include <gtest/gtest.h>

#include <map>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/env.h"

using fsdpp::ConfigError;
using fsdpp::dist::DistEnv;

namespace {
DistEnv parse(std::map<std::string, std::string> vars) {
  return DistEnv::from_lookup([&](std::string_view k) -> std::optional<std::string> {
    auto it = vars.find(std::string(k));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(std::map<std::string, std::string> vars) {
  try {
    parse(std::move(vars));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(DistEnv, NoVariablesIsOneProcess) {
  auto env = parse({});
  EXPECT_FALSE(env.launched);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
}

TEST(DistEnv, ReadsTorchrunVariables) {
  auto env = parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"},
                    {"MASTER_PORT", "29511"}, {"FSDPP_TIMEOUT_S", "12"}});
  EXPECT_TRUE(env.launched);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.1.2.3");
  EXPECT_EQ(env.master_port, 29511);
  EXPECT_EQ(env.timeout, std::chrono::seconds(12));
}

TEST(DistEnv, BadValuesNameTheVariable) {
  EXPECT_NE(error_of({{"RANK", "abc"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}})
                .find("RANK='abc' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}})
                .find("0 <= RANK < WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("RANK is set but WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT=70000 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_PORT is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "5"},
                      {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}})
                .find("LOCAL_RANK"),
            std::string::npos);
  EXPECT_NE(error_of({{"FSDPP_TIMEOUT_S", "-1"}}).find("FSDPP_TIMEOUT_S"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "9"},
                      {"MASTER_ADDR", ""}}).find("MASTER_ADDR is empty"),
            std::string::npos);
}
