// TensorSampler (data/tensor_sampler.h): in-memory examples split across ranks, resumable.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <set>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tensor_sampler.h"

using fsdpp::ConfigError;
using fsdpp::data::SamplerState;
using fsdpp::data::TensorSampler;

namespace {

// x's row i is (i, i) and y's is 10 * i: a batch's rows say which examples it holds.
std::vector<at::Tensor> numbered(int64_t n) {
  auto i = torch::arange(n, torch::kLong);
  return {torch::stack({i, i}, 1).to(torch::kFloat), i * 10};
}

}  // namespace

TEST(TensorSampler, RanksSplitEachEpochDisjointlyAndDropTheTail) {
  const int W = 3;
  for (int64_t epoch : {0, 1, 5}) {
    std::set<int64_t> seen;
    for (int r = 0; r < W; ++r) {
      TensorSampler s(numbered(11), {.rank = r, .world_size = W, .seed = 7});
      EXPECT_EQ(s.examples_per_rank(), 3);
      for (int64_t e : s.examples(epoch)) {
        EXPECT_TRUE(seen.insert(e).second) << "example " << e << " given twice in epoch " << epoch;
        EXPECT_GE(e, 0);
        EXPECT_LT(e, 11);
      }
    }
    EXPECT_EQ(seen.size(), 9u);  // 11 examples, 3 ranks: the 2 left over are dropped
  }
  TensorSampler a(numbered(11), {.seed = 7}), b(numbered(11), {.seed = 8});
  EXPECT_NE(a.examples(0), a.examples(1));  // each epoch its own order
  EXPECT_NE(a.examples(0), b.examples(0));  // and each seed
}

TEST(TensorSampler, WithoutShuffleRankRGetsEveryWorldSizeThExample) {
  TensorSampler s(numbered(10), {.rank = 1, .world_size = 4, .shuffle = false});
  EXPECT_EQ(s.examples(0), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(s.examples(3), (std::vector<int64_t>{1, 5}));
}

TEST(TensorSampler, BatchesAreTheRowsOfEveryTensorAndCrossEpochs) {
  TensorSampler s(numbered(8), {.rank = 0, .world_size = 2, .seed = 3});
  std::vector<int64_t> expected = s.examples(0);
  for (int64_t e : s.examples(1)) expected.push_back(e);
  std::vector<int64_t> got;
  for (int k = 0; k < 3; ++k) {  // 3 batches of 2 = 1.5 epochs of 4 examples
    auto batch = s.next_batch(2);
    ASSERT_EQ(batch.size(), 2u);
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t i = batch[1][b].item<int64_t>() / 10;
      EXPECT_EQ(batch[0][b][0].item<float>(), static_cast<float>(i));
      got.push_back(i);
    }
  }
  EXPECT_EQ(got, std::vector<int64_t>(expected.begin(), expected.begin() + 6));
  EXPECT_EQ(s.state(), (SamplerState{.epoch = 1, .position = 2}));
}

TEST(TensorSampler, ResumedFromItsStateItContinuesTheSameStream) {
  TensorSampler whole(numbered(20), {.rank = 1, .world_size = 2, .seed = 11});
  for (int k = 0; k < 4; ++k) whole.next_batch(3);  // 12 of 10 per epoch: into epoch 1
  const SamplerState at = whole.state();
  TensorSampler resumed(numbered(20), {.rank = 1, .world_size = 2, .seed = 11});
  resumed.load_state(at);
  for (int k = 0; k < 5; ++k) {
    auto a = whole.next_batch(3), b = resumed.next_batch(3);
    EXPECT_TRUE(torch::equal(a[0], b[0]) && torch::equal(a[1], b[1])) << "batch " << k;
  }
}

TEST(TensorSampler, RefusesBadDatasetsAndStatesSayingWhatIsExpected) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no ConfigError");
  };
  EXPECT_NE(message([] { TensorSampler({}, {}); }).find("at least one tensor"), std::string::npos);
  EXPECT_NE(message([] { TensorSampler({torch::zeros({4, 2}), torch::zeros({5})}, {}); })
                .find("tensor 1 of the dataset has 5 rows, tensor 0 has 4"),
            std::string::npos);
  EXPECT_NE(message([] { TensorSampler({torch::zeros({2})}, {.rank = 0, .world_size = 3}); })
                .find("fewer than world_size=3"),
            std::string::npos);
  TensorSampler s(numbered(4), {});
  EXPECT_NE(message([&] { s.load_state({.epoch = 0, .position = 5}); })
                .find("0 <= position <= 4"),
            std::string::npos);
}
