// Multi-rank behaviour that is easiest to set up in one process: ranks as threads.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "../support/thread_world.h"
#include "fsdpp/common/error.h"

using namespace fsdpp;

TEST(ThreadWorld, ReduceScatterAndAllGatherOnTwoRanks) {
  test::run_ranks(2, [](dist::World& w) {
    auto& pg = *w.group();
    auto in = torch::arange(10, torch::kFloat) + w.rank();  // (2*5)
    auto out = torch::empty({5});
    pg.reduce_scatter_tensor(out, in, dist::ReduceOp::SUM);
    auto expect = (torch::arange(10, torch::kFloat) * 2 + 1).narrow(0, 5 * w.rank(), 5);
    EXPECT_TRUE(torch::equal(out, expect)) << out;
    auto gathered = torch::empty({10});
    pg.all_gather_into_tensor(gathered, out);
    EXPECT_TRUE(torch::equal(gathered, torch::arange(10, torch::kFloat) * 2 + 1));
  });
}

TEST(ThreadWorld, TwoByTwoMeshGroups) {
  test::run_ranks(4, [](dist::World& w) {
    auto mesh = w.init_device_mesh({2, 2}, {"replicate", "shard"});
    const int r = w.rank();
    EXPECT_EQ(mesh->coordinate(), (std::vector<int>{r / 2, r % 2}));
    EXPECT_EQ(mesh->group_ranks(mesh->dim_index("shard")),
              (std::vector<int>{2 * (r / 2), 2 * (r / 2) + 1}));
    EXPECT_EQ(mesh->group_ranks(mesh->dim_index("replicate")), (std::vector<int>{r % 2, r % 2 + 2}));
    // The groups really talk to their members: sum of global ranks along each dim.
    auto t = torch::full({1}, static_cast<float>(r));
    mesh->group("shard")->all_reduce(t, dist::ReduceOp::SUM);
    EXPECT_EQ(t.item<float>(), static_cast<float>(4 * (r / 2) + 1));
    auto u = torch::full({1}, static_cast<float>(r));
    mesh->group("replicate")->all_reduce(u, dist::ReduceOp::SUM);
    EXPECT_EQ(u.item<float>(), static_cast<float>(2 * (r % 2) + 2));
    EXPECT_THROW(mesh->group("nope"), ConfigError);
  });
}

TEST(ThreadWorld, FirstCollectivesOfManyGroupsAtOnce) {
  // Regression: with PyTorch's flight recorder on, groups whose first collectives race from
  // different threads corrupted its map (a segfault in about 1 run in 20 of the Llama test).
  // fsdpp turns the recorder off unless TORCH_FR_BUFFER_SIZE asks for it.
  for (int round = 0; round < 60; ++round) {
    test::run_ranks(4, [](dist::World& w) {
      auto t = torch::full({4}, 1.0f);
      w.group()->all_reduce(t, dist::ReduceOp::SUM);
      EXPECT_TRUE(torch::equal(t, torch::full({4}, 4.0f)));
    });
  }
  // /proc/self/environ is the environment the process started with: setenv does not change it.
  std::ifstream environ_file("/proc/self/environ");
  const std::string initial((std::istreambuf_iterator<char>(environ_file)), {});
  const bool user_chose = initial.find("TORCH_FR_BUFFER_SIZE=") != std::string::npos ||
                          initial.find("TORCH_NCCL_TRACE_BUFFER_SIZE=") != std::string::npos;
  const char* size = std::getenv("TORCH_FR_BUFFER_SIZE");
  if (!user_chose) {
    ASSERT_NE(size, nullptr);
    EXPECT_STREQ(size, "0");
  }
}

TEST(ThreadWorld, MeshShapeMustCoverTheWorld) {
  test::run_ranks(2, [](dist::World& w) {
    EXPECT_THROW(w.init_device_mesh({2, 2}, {"a", "b"}), ConfigError);
  });
}

TEST(ThreadWorld, RankThatSkipsACollectiveGivesATimeoutNamingIt) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  std::atomic<bool> done{false};
  test::run_ranks(
      2,
      [&](dist::World& w) {
        if (w.rank() == 1) {  // alive, but never takes part
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        auto t = torch::ones({8});
        try {
          w.group()->all_reduce(t, dist::ReduceOp::SUM, {"layers.3"});
        } catch (const TimeoutError& e) {
          message = e.what();
        }
        done = true;
      },
      std::chrono::seconds(2));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  EXPECT_NE(message.find("all_reduce"), std::string::npos) << message;
  EXPECT_NE(message.find("32 B Float"), std::string::npos) << message;
  EXPECT_NE(message.find("layers.3"), std::string::npos) << message;
  EXPECT_LT(elapsed, std::chrono::seconds(15));
}

TEST(ThreadWorld, MissingRankIsNamedAtRendezvous) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  dist::DistEnv env;
  env.rank = 0;
  env.world_size = 3;
  env.launched = true;
  env.timeout = std::chrono::seconds(1);
  dist::InitOptions o;
  o.backend = dist::BackendKind::GLOO;
  try {
    dist::init_world(env, store, o);
    FAIL() << "rendezvous with missing ranks succeeded";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1, 2 never joined"), std::string::npos)
        << e.what();
  }
}

// Rank 0 of a job whose MASTER_PORT is taken cannot host the store: a clear error, not a hang.
TEST(InitFromEnv, PortInUseIsAClearError) {
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  auto holder = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  const std::string port = std::to_string(holder->getPort());
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port.c_str(), 1);
  setenv("FSDPP_TIMEOUT_S", "2", 1);
  std::string message;
  try {
    dist::init_from_env();
  } catch (const fsdpp::Error& e) {
    message = e.what();
  }
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "FSDPP_TIMEOUT_S"}) unsetenv(v);
  EXPECT_NE(message.find("rank 0 cannot host the rendezvous store on 127.0.0.1:" + port), std::string::npos)
      << message;
}
