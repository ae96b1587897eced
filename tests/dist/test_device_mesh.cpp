#include <gtest/gtest.h>
#include <torch/torch.h>

#include "world_fixture.h"

using namespace fsdpp;

// Across real processes: a 2x2 mesh over 4 ranks gives the right group members, and the
// sub-groups carry traffic.
TEST(DeviceMesh, TwoByTwoOverFourRanks) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "run with --nproc-per-node 4";
  auto mesh = w.init_device_mesh({2, 2}, {"replicate", "shard"});
  const int r = w.rank();
  EXPECT_EQ(mesh->group_ranks(1), (std::vector<int>{2 * (r / 2), 2 * (r / 2) + 1}));
  EXPECT_EQ(mesh->group_ranks(0), (std::vector<int>{r % 2, r % 2 + 2}));
  auto in = torch::full({4}, static_cast<float>(r));
  auto out = torch::empty({8});
  mesh->group("shard")->all_gather_into_tensor(out, in);
  EXPECT_EQ(out[0].item<float>(), static_cast<float>(2 * (r / 2)));
  EXPECT_EQ(out[4].item<float>(), static_cast<float>(2 * (r / 2) + 1));
  auto t = torch::full({1}, static_cast<float>(r));
  mesh->group("replicate")->all_reduce(t, dist::ReduceOp::SUM);
  EXPECT_EQ(t.item<float>(), static_cast<float>(2 * (r % 2) + 2));
}
