// Collectives across real processes, for every dtype FSDP uses and sizes that do not divide.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

const std::vector<torch::Dtype> kDtypes{torch::kFloat, torch::kBFloat16, torch::kHalf};
const std::vector<int64_t> kSizes{1, 7, 1000, 4099};

// Small integers: exact in every dtype, so results compare exactly.
torch::Tensor pattern(int64_t n, int rank, int mod, torch::Dtype dt) {
  return ((torch::arange(n, torch::kLong) + 3 * rank) % mod).to(dt);
}

double tol(torch::Dtype dt) { return dt == torch::kFloat ? 1e-6 : 1e-2; }

}  // namespace

TEST(Collectives, AllGatherIntoTensor) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  for (auto dt : kDtypes) {
    for (auto size : kSizes) {
      auto in = pattern(size, pg.rank(), 17, dt);
      auto out = torch::empty({size * n}, torch::dtype(dt));
      pg.all_gather_into_tensor(out, in);
      for (int r = 0; r < n; ++r) {
        EXPECT_TRUE(torch::equal(out.narrow(0, r * size, size), pattern(size, r, 17, dt)))
            << "dtype " << dt << " size " << size << " rank " << r;
      }
    }
  }
}

TEST(Collectives, ReduceScatterSumAndAvg) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  for (auto dt : kDtypes) {
    for (auto chunk : kSizes) {
      auto in = pattern(chunk * n, pg.rank(), 11, dt);
      auto expect = torch::zeros({chunk * n}, torch::kDouble);
      for (int r = 0; r < n; ++r) expect += pattern(chunk * n, r, 11, torch::kDouble);
      auto mine = expect.narrow(0, pg.rank() * chunk, chunk);
      auto out = torch::empty({chunk}, torch::dtype(dt));
      pg.reduce_scatter_tensor(out, in, dist::ReduceOp::SUM);
      EXPECT_TRUE(torch::equal(out.to(torch::kDouble), mine)) << dt << " chunk " << chunk;
      pg.reduce_scatter_tensor(out, in, dist::ReduceOp::AVG);
      EXPECT_TRUE(torch::allclose(out.to(torch::kDouble), mine / n, tol(dt), tol(dt)))
          << dt << " chunk " << chunk;
    }
  }
}

TEST(Collectives, AllReduceSumAvgMax) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  for (auto dt : kDtypes) {
    for (auto size : kSizes) {
      auto sum = torch::zeros({size}, torch::kDouble);
      auto mx = torch::full({size}, -1.0, torch::kDouble);
      for (int r = 0; r < n; ++r) {
        sum += pattern(size, r, 13, torch::kDouble);
        mx = torch::maximum(mx, pattern(size, r, 13, torch::kDouble));
      }
      auto t = pattern(size, pg.rank(), 13, dt);
      pg.all_reduce(t, dist::ReduceOp::SUM);
      EXPECT_TRUE(torch::equal(t.to(torch::kDouble), sum)) << dt << " size " << size;
      t = pattern(size, pg.rank(), 13, dt);
      pg.all_reduce(t, dist::ReduceOp::AVG);
      EXPECT_TRUE(torch::allclose(t.to(torch::kDouble), sum / n, tol(dt), tol(dt)));
      t = pattern(size, pg.rank(), 13, dt);
      pg.all_reduce(t, dist::ReduceOp::MAX);
      EXPECT_TRUE(torch::equal(t.to(torch::kDouble), mx));
    }
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  auto& pg = *test::world().group();
  for (int root = 0; root < pg.size(); ++root) {
    auto t = pattern(1001, pg.rank(), 19, torch::kFloat);
    pg.broadcast(t, root);
    EXPECT_TRUE(torch::equal(t, pattern(1001, root, 19, torch::kFloat)));
  }
  pg.barrier();
}

TEST(Collectives, AsyncHandlesCompleteInIssueOrder) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  std::vector<torch::Tensor> outs;
  std::vector<dist::Work> works;
  for (int i = 0; i < 8; ++i) {
    auto in = torch::full({5 + i}, static_cast<float>(pg.rank() + i));
    outs.push_back(torch::empty({(5 + i) * n}));
    works.push_back(pg.all_gather_into_tensor_async(outs.back(), in));
  }
  for (auto& w : works) w.wait();
  for (int i = 0; i < 8; ++i) {
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(torch::equal(outs[i].narrow(0, r * (5 + i), 5 + i),
                               torch::full({5 + i}, static_cast<float>(r + i))));
    }
  }
}

TEST(Collectives, CountersFollowTheRingAlgorithms) {
  auto& pg = *test::world().group();
  const uint64_t n = pg.size();
  auto before = pg.counters();
  auto in = torch::ones({1000});  // 4000 B
  auto out = torch::empty({1000 * static_cast<int64_t>(n)});
  pg.all_gather_into_tensor(out, in);
  pg.reduce_scatter_tensor(in, out, dist::ReduceOp::SUM);
  auto ar = torch::ones({1000 * static_cast<int64_t>(n)});
  pg.all_reduce(ar, dist::ReduceOp::SUM);
  auto d = pg.counters() - before;
  EXPECT_EQ(d.bytes_of(dist::Collective::ALL_GATHER), 4000 * (n - 1));
  EXPECT_EQ(d.bytes_of(dist::Collective::REDUCE_SCATTER), 4000 * (n - 1));
  EXPECT_EQ(d.bytes_of(dist::Collective::ALL_REDUCE), 2 * 4000 * n * (n - 1) / n);
  EXPECT_EQ(d.calls_of(dist::Collective::ALL_GATHER), 1u);
  EXPECT_EQ(d.calls_of(dist::Collective::REDUCE_SCATTER), 1u);
}

TEST(Collectives, ShapeMismatchIsAClearError) {
  auto& pg = *test::world().group();
  auto in = torch::ones({3});
  auto out = torch::empty({3 * pg.size() + 1});
  try {
    pg.all_gather_into_tensor(out, in);
    FAIL();
  } catch (const fsdpp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[dist] all_gather_into_tensor"), std::string::npos);
  }
}
