// The public view of sharded parameters (fsdpp/fsdp/sharded_param.h) against the unsharded model
// it was made from: names, shapes, the rows each rank holds, the local shard, the groups, and
// the gather, for the parameters themselves and for tensors laid out like them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "../support/test_models.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "world_fixture.h"

using namespace fsdpp;

TEST(FullyShard, ShardedParamsDescribeTheShardsAndGatherThem) {
  auto& w = test::world();
  std::vector<std::pair<ShardingStrategy, std::shared_ptr<dist::DeviceMesh>>> setups = {
      {ShardingStrategy::FULL_SHARD, w.mesh()}, {ShardingStrategy::NO_SHARD, w.mesh()}};
  if (w.size() == 4) {
    setups.emplace_back(ShardingStrategy::HYBRID_SHARD,
                        w.init_device_mesh({2, 2}, {"replicate", "shard"}));
  }
  for (const auto& [strategy, mesh] : setups) {
    SCOPED_TRACE(to_string(strategy));
    torch::manual_seed(5);
    test::OddMLP ref;
    torch::manual_seed(5);
    test::OddMLP model;
    FullyShardOptions o;
    o.strategy = strategy;
    o.mesh = mesh;
    model->shard(o);
    std::map<std::string, torch::Tensor> expected;
    for (const auto& kv : ref->named_parameters()) expected[kv.key()] = kv.value().detach();

    const int shard_world = strategy == ShardingStrategy::NO_SHARD ? 1
                            : strategy == ShardingStrategy::HYBRID_SHARD ? 2
                                                                          : w.size();
    const int replicas = w.size() / shard_world;
    const auto views = sharded_params(*model);
    ASSERT_EQ(views.size(), expected.size());
    std::vector<const ShardedParam*> ps;
    std::vector<torch::Tensor> shards, doubled;
    for (const auto& v : views) {
      SCOPED_TRACE(v.fqn);
      ASSERT_TRUE(expected.count(v.fqn));
      const auto& full = expected.at(v.fqn);
      EXPECT_EQ(v.global_shape, full.sizes().vec());
      EXPECT_TRUE(v.at_rest);
      EXPECT_EQ(v.param.data_ptr(), v.local_shard.data_ptr());
      EXPECT_EQ(static_cast<bool>(v.replicate_group), replicas > 1);
      if (v.replicate_group) EXPECT_EQ(v.replicate_group->size(), replicas);
      const int64_t dim0 = full.dim() == 0 ? 1 : full.size(0);
      auto rows = full.reshape({dim0, -1});
      if (shard_world == 1) {
        EXPECT_TRUE(v.placements.empty());
        EXPECT_TRUE(torch::equal(v.local_shard.reshape(full.sizes()), full));
      } else {
        ASSERT_EQ(v.placements.size(), 1u);
        const auto& pl = v.placements[0];
        EXPECT_EQ(pl.mesh_dim, strategy == ShardingStrategy::HYBRID_SHARD ? "shard" : mesh->dim_names()[0]);
        EXPECT_EQ(pl.dim, 0);
        EXPECT_EQ(pl.size, dim0);
        EXPECT_EQ(pl.world, shard_world);
        EXPECT_EQ(pl.group->size(), shard_world);
        EXPECT_EQ(pl.chunk, (dim0 + shard_world - 1) / shard_world);
        EXPECT_EQ(v.local_shard.size(0), pl.chunk);
        int64_t next = 0;  // the ranks' rows tile [0, dim0) in rank order
        for (int k = 0; k < pl.world; ++k) {
          if (pl.rows_of(k) > 0) EXPECT_EQ(pl.begin_of(k), next);
          next += pl.rows_of(k);
        }
        EXPECT_EQ(next, dim0);
        const int64_t mine = pl.rows_of(pl.rank);
        if (mine > 0) {
          EXPECT_TRUE(torch::equal(v.local_shard.reshape({pl.chunk, -1}).narrow(0, 0, mine),
                                   rows.narrow(0, pl.begin_of(pl.rank), mine)));
        }
      }
      ps.push_back(&v);
      shards.push_back(v.local_shard);
      // Optimizer-state-like tensors, one of them absent.
      doubled.push_back(v.fqn == "head.bias" ? torch::Tensor() : v.local_shard * 2 + 1);
    }
    const auto whole = gather_full(ps, shards);
    const auto whole2 = gather_full(ps, doubled);
    for (size_t i = 0; i < views.size(); ++i) {
      SCOPED_TRACE(views[i].fqn);
      const auto& full = expected.at(views[i].fqn);
      EXPECT_TRUE(torch::equal(whole[i], full));
      EXPECT_FALSE(whole[i].is_same(views[i].local_shard));
      if (doubled[i].defined()) {
        EXPECT_TRUE(torch::equal(whole2[i], full * 2 + 1));
      } else {
        EXPECT_FALSE(whole2[i].defined());
      }
      EXPECT_TRUE(torch::equal(views[i].gather(views[i].local_shard), full));
    }
  }
}
