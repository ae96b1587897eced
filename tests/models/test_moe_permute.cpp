// Expert parallelism's pieces that need no other rank: the rank-major -> expert-major order of
// received rows (torchtitan's generate_permute_indices example), and the experts' grouped
// forward that consumes it, against the routed forward of one process.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>

#include "fsdpp/common/error.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "fsdpp/moe/permute.h"

using fsdpp::ConfigError;
using fsdpp::moe::expert_major_order;

namespace {
std::vector<int64_t> as_vector(const at::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}
}  // namespace

// torchtitan's test_permute_indices case: 2 ranks, 2 experts per rank, counts [2, 3, 1, 4].
TEST(MoePermutation, TorchtitanExample) {
  auto o = expert_major_order(torch::tensor({2, 3, 1, 4}, at::kLong), 2);
  EXPECT_EQ(as_vector(o.indices), (std::vector<int64_t>{0, 1, 5, 2, 3, 4, 6, 7, 8, 9}));
  EXPECT_EQ(o.tokens_per_expert, (std::vector<int64_t>{3, 7}));
  // inverse undoes indices: rows gathered expert-major and back are the rows received.
  auto rows = torch::arange(10) * 10;
  EXPECT_TRUE(at::equal(rows.index_select(0, o.indices).index_select(0, o.inverse), rows));
}

TEST(MoePermutation, EmptyBlocksAndNoRows) {
  // 3 ranks, 2 experts per rank; rank 1 sent nothing, expert 1 receives only from rank 2.
  auto o = expert_major_order(torch::tensor({2, 0, 0, 0, 1, 3}, at::kLong), 2);
  EXPECT_EQ(as_vector(o.indices), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(o.tokens_per_expert, (std::vector<int64_t>{3, 3}));
  o = expert_major_order(torch::tensor({0, 2, 1, 0}, at::kLong), 2);
  EXPECT_EQ(as_vector(o.indices), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(o.tokens_per_expert, (std::vector<int64_t>{1, 2}));
  o = expert_major_order(torch::zeros({4}, at::kLong), 1);
  EXPECT_EQ(o.indices.numel(), 0);
  EXPECT_EQ(o.tokens_per_expert, (std::vector<int64_t>{0}));
}

TEST(MoePermutation, BadCountsAreErrors) {
  EXPECT_THROW(expert_major_order(torch::tensor({1, 2, 3}, at::kLong), 2), ConfigError);
  EXPECT_THROW(expert_major_order(torch::tensor({1, -2}, at::kLong), 1), ConfigError);
}

// The grouped forward (rows sorted by expert, unweighted) weighted and summed per token equals
// the routed forward; with no rows at all every weight still gets a gradient of zeros.
TEST(MoeExperts, GroupedForwardEqualsRouted) {
  torch::manual_seed(4);
  fsdpp::models::Qwen3MoeExperts ex(4, 16, 8);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : ex->parameters()) p.normal_(0, 0.3);
  }
  const int64_t N = 9, k = 2;
  auto x = torch::randn({N, 16});
  auto ids = std::get<1>(at::topk(torch::rand({N, 4}), k, -1));
  auto w = torch::rand({N, k});
  auto routed = ex->forward(x, ids, w);
  auto order = at::argsort(ids.reshape({-1}), /*stable=*/true);
  auto token_of = at::floor_divide(order, k);
  auto counts = at::bincount(ids.reshape({-1}), {}, 4);
  std::vector<int64_t> per_expert(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + 4);
  auto y = ex->forward(x.index_select(0, token_of), per_expert);
  auto grouped = at::zeros_like(x).index_add(
      0, token_of, y * w.reshape({-1}).index_select(0, order).unsqueeze(1));
  EXPECT_TRUE(at::equal(grouped, routed));  // the same operations in the same order
  ex->zero_grad();
  auto none = ex->forward(torch::zeros({0, 16}, torch::requires_grad()), {0, 0, 0, 0});
  EXPECT_EQ(none.sizes(), (std::vector<int64_t>{0, 16}));
  none.sum().backward();
  for (const auto& p : ex->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
  }
  EXPECT_THROW(ex->forward(x, std::vector<int64_t>{1, 1, 1, 1}), ConfigError);
}

// min / max / coefficient of variation of tokens per expert, against the numbers worked out.
TEST(MoeExpertLoad, SummaryOfTokensPerExpert) {
  using fsdpp::models::summarize_expert_load;
  auto even = summarize_expert_load({4, 4, 4, 4});
  EXPECT_EQ(even.min, 4);
  EXPECT_EQ(even.max, 4);
  EXPECT_EQ(even.cv, 0.0);
  // mean 4, deviations -4, 4, -4, 4: std 4, cv 1.
  auto skewed = summarize_expert_load({0, 8, 0, 8});
  EXPECT_EQ(skewed.min, 0);
  EXPECT_EQ(skewed.max, 8);
  EXPECT_DOUBLE_EQ(skewed.cv, 1.0);
  // One expert takes all 12 of 4: mean 3, std sqrt((81 + 3 * 9) / 4) = sqrt(27), cv sqrt(3).
  EXPECT_DOUBLE_EQ(summarize_expert_load({12, 0, 0, 0}).cv, std::sqrt(3.0));
  EXPECT_EQ(summarize_expert_load({0, 0}).cv, 0.0);
  EXPECT_EQ(summarize_expert_load({}).max, 0);
}
