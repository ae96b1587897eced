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

namespace {

// Rows rank s sends rank d in the all-to-all tests: uneven, some zero; on 2+ ranks rank 0 sends
// nothing and rank n-1 receives nothing.
int64_t a2a_rows(int s, int d, int n) {
  if (n > 1 && (s == 0 || d == n - 1)) return 0;
  return (s + 2 * d) % 3 + (s == d ? 1 : 0);
}

// The block rank s sends rank d: (rows, 3), values exact in bf16.
torch::Tensor a2a_block(int s, int d, int n, torch::Dtype dt) {
  const int64_t rows = a2a_rows(s, d, n);
  return ((torch::arange(rows * 3, torch::kLong) + 17 * s + 5 * d) % 97).view({rows, 3}).to(dt);
}

}  // namespace

// Uneven and zero-sized splits, a rank that sends nothing and one that receives nothing; the
// result against the exchange computed locally, and the counters against the bytes sent.
TEST(Collectives, AllToAllSingleUnevenSplits) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  const int me = pg.rank();
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    std::vector<int64_t> in_splits, out_splits;
    std::vector<torch::Tensor> in_blocks, out_blocks;
    uint64_t sent = 0;
    for (int j = 0; j < n; ++j) {
      in_splits.push_back(a2a_rows(me, j, n));
      out_splits.push_back(a2a_rows(j, me, n));
      in_blocks.push_back(a2a_block(me, j, n, dt));
      out_blocks.push_back(a2a_block(j, me, n, dt));
      if (j != me) sent += static_cast<uint64_t>(in_blocks.back().nbytes());
    }
    auto input = torch::cat(in_blocks);
    auto expect = torch::cat(out_blocks);
    auto output = torch::full_like(expect, -1);
    const auto before = pg.counters();
    pg.all_to_all_single(output, input, out_splits, in_splits, {"experts"});
    EXPECT_TRUE(torch::equal(output, expect)) << dt << "\n" << output << "\n" << expect;
    const auto d = pg.counters() - before;
    EXPECT_EQ(d.bytes_of(dist::Collective::ALL_TO_ALL), sent) << dt;
    EXPECT_EQ(d.calls_of(dist::Collective::ALL_TO_ALL), 1u);
    EXPECT_EQ(d.total_bytes(), sent);
  }
}

// Empty split sizes split evenly; a 3-D tensor moves whole rows; async form.
TEST(Collectives, AllToAllSingleEvenSplitsAsync) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  auto in = torch::arange(n * 2 * 4 * 5, torch::kFloat).view({n * 2, 4, 5}) + 1000 * pg.rank();
  auto out = torch::empty_like(in);
  auto work = pg.all_to_all_single_async(out, in, {}, {});
  work.wait();
  for (int r = 0; r < n; ++r) {
    auto from_r = torch::arange(n * 2 * 4 * 5, torch::kFloat).view({n * 2, 4, 5}) + 1000 * r;
    EXPECT_TRUE(torch::equal(out.narrow(0, 2 * r, 2), from_r.narrow(0, 2 * pg.rank(), 2))) << r;
  }
  // Split sizes that do not add up are refused before anything moves, naming them.
  try {
    pg.all_to_all_single(out, in, {}, std::vector<int64_t>(n, 1));
    FAIL() << "expected an error";
  } catch (const fsdpp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("add up to"), std::string::npos) << e.what();
  }
  if (n == 1) return;
  // What a rank sends itself must be what it expects from itself.
  auto rows = torch::zeros({n, 1});
  std::vector<int64_t> ones(n, 1), skewed(n, 1);
  skewed[pg.rank()] = 0;
  skewed[(pg.rank() + 1) % n] = 2;
  try {
    pg.all_to_all_single(rows, rows, ones, skewed);
    FAIL() << "expected an error";
  } catch (const fsdpp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("from itself"), std::string::npos) << e.what();
  }
}
