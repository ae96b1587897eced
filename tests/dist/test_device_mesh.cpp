#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"

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

namespace {

// Coordinates of `rank` on a row-major mesh of `shape`, computed independently of DeviceMesh.
std::vector<int> coords_of(int rank, const std::vector<int>& shape) {
  std::vector<int> c(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    c[d] = rank % shape[d];
    rank /= shape[d];
  }
  return c;
}

// The ranks that share `rank`'s coordinates on every dim outside `dims`, ascending (row-major
// over `dims` is ascending global rank when the other coordinates are fixed).
std::vector<int> expected_group(int rank, const std::vector<int>& shape, const std::vector<int>& dims,
                                int world_size) {
  const auto mine = coords_of(rank, shape);
  std::vector<int> out;
  for (int q = 0; q < world_size; ++q) {
    const auto c = coords_of(q, shape);
    bool same = true;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (std::find(dims.begin(), dims.end(), static_cast<int>(d)) == dims.end() && c[d] != mine[d]) {
        same = false;
      }
    }
    if (same) out.push_back(q);
  }
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The group holds exactly `expect` and really talks to them: the sum of their global ranks.
void expect_group(dist::ProcessGroup& g, const std::vector<int>& expect, const std::string& what) {
  EXPECT_EQ(g.global_ranks(), expect) << what;
  EXPECT_EQ(g.size(), static_cast<int>(expect.size())) << what;
  auto t = torch::full({3}, static_cast<float>(test::world().rank()));
  g.all_reduce(t, dist::ReduceOp::SUM);
  const float sum = static_cast<float>(std::accumulate(expect.begin(), expect.end(), 0));
  EXPECT_TRUE(torch::equal(t, torch::full({3}, sum))) << what << ": " << t;
}

}  // namespace

// Three 3-D shapes over 4 ranks: every dim's group, every flattened pair and the whole mesh
// flattened, against the layout computed from coordinates.
TEST(DeviceMesh, ThreeDimsOverFourRanks) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "run with --nproc-per-node 4";
  const std::vector<std::string> names{"a", "b", "c"};
  for (const auto& shape : std::vector<std::vector<int>>{{2, 1, 2}, {1, 2, 2}, {2, 2, 1}}) {
    const std::string tag = fmt::format("shape {}", fmt::join(shape, "x"));
    auto mesh = w.init_device_mesh(shape, names);
    ASSERT_EQ(mesh->ndim(), 3);
    EXPECT_EQ(mesh->coordinate(), coords_of(w.rank(), shape)) << tag;
    EXPECT_EQ(mesh->size(), 4);
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(mesh->group_ranks(d), expected_group(w.rank(), shape, {d}, 4)) << tag << " dim " << d;
      EXPECT_EQ(mesh->group(names[d]), mesh->group(d));
      expect_group(*mesh->group(d), expected_group(w.rank(), shape, {d}, 4),
                   tag + " dim " + names[d]);
    }
    const std::vector<std::vector<int>> flats{{0, 1}, {1, 2}, {0, 2}, {0, 1, 2}};
    for (const auto& dims : flats) {
      std::vector<std::string> dn;
      for (int d : dims) dn.push_back(names[d]);
      const std::string flat_name = fmt::format("{}", fmt::join(dn, ""));
      auto g = mesh->flatten(dn, flat_name);
      ASSERT_TRUE(g);
      EXPECT_EQ(mesh->group(flat_name), g);
      expect_group(*g, expected_group(w.rank(), shape, dims, 4), tag + " flat " + flat_name);
    }
    // Flattening the same dims again is the same group, made once.
    EXPECT_EQ(mesh->flatten({"a", "b"}, "ab"), mesh->group("ab"));
  }
}

// A sub-mesh is a view: the slice holding this rank, with the parent's own groups; flattening
// through it is the same as on the parent.
TEST(DeviceMesh, SubMeshAndFlatten) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "run with --nproc-per-node 4";
  const int r = w.rank();
  // (dp_replicate 2, dp_shard 2, tp 1): the torchtitan layout at tp = 1.
  auto mesh = w.init_device_mesh({2, 2, 1}, {"dp_replicate", "dp_shard", "tp"});
  auto inner = mesh->sub({"dp_shard", "tp"});
  EXPECT_EQ(inner->ndim(), 2);
  EXPECT_EQ(inner->shape(), (std::vector<int>{2, 1}));
  EXPECT_EQ(inner->dim_names(), (std::vector<std::string>{"dp_shard", "tp"}));
  EXPECT_EQ(inner->coordinate(), (std::vector<int>{r % 2, 0}));
  EXPECT_EQ(inner->ranks(), (std::vector<int>{2 * (r / 2), 2 * (r / 2) + 1}));
  EXPECT_EQ(inner->group("dp_shard"), mesh->group("dp_shard"));
  EXPECT_EQ(inner->group(1), mesh->group("tp"));
  EXPECT_EQ(mesh->sub({"dp_replicate", "tp"})->ranks(), (std::vector<int>{r % 2, r % 2 + 2}));
  EXPECT_EQ(mesh->ranks(), (std::vector<int>{0, 1, 2, 3}));
  // dp = dp_replicate x dp_shard: every rank, in rank order.
  auto dp = mesh->flatten({"dp_replicate", "dp_shard"}, "dp");
  expect_group(*dp, {0, 1, 2, 3}, "dp");
  EXPECT_EQ(mesh->group_ranks("dp"), (std::vector<int>{0, 1, 2, 3}));
  // "dp" spans a dim the inner view lacks: not visible there; the error lists what is.
  try {
    inner->group("dp");
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_PRED2(contains, e.what(), std::string("no dim or flattened group 'dp'"));
    EXPECT_PRED2(contains, e.what(), std::string("dp_shard, tp"));
  }
  // Flattened through the view: the same ranks as on the parent.
  auto shard_tp = inner->flatten({"dp_shard", "tp"}, "shard_tp");
  expect_group(*shard_tp, {2 * (r / 2), 2 * (r / 2) + 1}, "shard_tp");
  EXPECT_EQ(mesh->group("shard_tp"), shard_tp);
  // A sub-mesh of one dim, and of every dim.
  EXPECT_EQ(mesh->sub({"tp"})->group(0)->size(), 1);
  EXPECT_EQ(mesh->sub({"dp_replicate", "dp_shard", "tp"})->coordinate(), mesh->coordinate());
}

TEST(DeviceMesh, BadShapesAndNames) {
  auto& w = test::world();
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no ConfigError";
  };
  // Product differs from the world size: the message names both.
  const int n = w.size();
  EXPECT_PRED2(contains, message([&] { w.init_device_mesh({n + 1, 2, 1}, {"a", "b", "c"}); }),
              std::string(fmt::format("shape {}x2x1 covers {} ranks but the world has {}",
                                               n + 1, 2 * (n + 1), n)));
  EXPECT_PRED2(contains, message([&] { w.init_device_mesh({n, 1, 1}, {"a", "b", "a"}); }),
              std::string("got 'a' twice"));
  EXPECT_PRED2(contains, message([&] { w.init_device_mesh({n, 1}, {"a"}); }),
              std::string("has 2 dims but 1 names"));
  EXPECT_PRED2(contains, message([&] { w.init_device_mesh({n, 0}, {"a", "b"}); }),
              std::string("must be >= 1"));
  EXPECT_PRED2(contains, message([&] { w.init_device_mesh({}, {}); }), std::string("at least one dim"));
  auto mesh = w.init_device_mesh({1, n, 1}, {"pp", "dp", "tp"});
  EXPECT_PRED2(contains, message([&] { mesh->sub({"dp", "ep"}); }),
              std::string("no dim 'ep'; its dims are pp, dp, tp"));
  EXPECT_PRED2(contains, message([&] { mesh->sub({"tp", "dp"}); }),
              std::string("in the mesh's order (pp, dp, tp)"));
  EXPECT_PRED2(contains, message([&] { mesh->sub({"dp", "dp"}); }), std::string("distinct"));
  EXPECT_PRED2(contains, message([&] { mesh->flatten({"pp", "dp"}, "tp"); }),
              std::string("already a dim"));
  EXPECT_PRED2(contains, message([&] { mesh->group("ep"); }), std::string("its dims are pp, dp, tp"));
  // After the errors every rank is still in step: one more mesh and a collective over it.
  auto ok = w.init_device_mesh({1, n, 1}, {"pp", "dp", "tp"});
  expect_group(*ok->flatten({"pp", "dp", "tp"}, "all"), expected_group(w.rank(), {n}, {0}, n), "all");
}
