// first_nonfinite_grad: the parameter, kind and rank where non-finite gradients first appear,
// agreed by every rank of a FULL_SHARD model (ranks as threads). Checked against the answer
// computed directly from where the test put the bad values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "../support/test_models.h"
#include "../support/thread_world.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/optim/nonfinite_grad.h"

using namespace fsdpp;

namespace {

// A sharded TinyTransformer with finite gradients from one backward.
test::TinyTransformer sharded_model(dist::World& w) {
  torch::manual_seed(0);
  test::TinyTransformer m(17, 8, 2, 2);
  FullyShardOptions o;
  o.mesh = w.mesh();
  m->shard(o);
  auto tokens = torch::randint(17, {2, 5});
  fsdpp::forward(m, tokens).sum().backward();
  return m;
}

}  // namespace

TEST(NonfiniteGrad, FiniteGradientsGiveNothing) {
  test::run_ranks(2, [](dist::World& w) {
    auto m = sharded_model(w);
    EXPECT_FALSE(first_nonfinite_grad(*m, w.group().get()));
  });
}

// Rank 1 has a NaN in a later parameter, rank 0 an inf in an earlier one and a NaN after: the
// earliest parameter wins, whatever rank holds it.
TEST(NonfiniteGrad, EarliestParameterOnAnyRank) {
  test::run_ranks(2, [](dist::World& w) {
    auto m = sharded_model(w);
    const auto named = m->named_parameters();
    std::vector<std::string> names;
    for (const auto& p : named) names.push_back(p.key());
    ASSERT_GT(names.size(), 6u);
    torch::NoGradGuard no_grad;
    auto poison = [&](size_t i, double v) {
      auto g = named[names[i]].mutable_grad();
      ASSERT_TRUE(g.defined() && g.numel() > 0) << names[i];
      g.view({-1})[0] = v;
    };
    if (w.rank() == 1) poison(5, std::nan(""));
    if (w.rank() == 0) {
      poison(3, -std::numeric_limits<double>::infinity());
      poison(6, std::nan(""));
    }
    auto bad = first_nonfinite_grad(*m, w.group().get());
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->name, names[3]);
    EXPECT_EQ(bad->kind, "-inf");
    EXPECT_EQ(bad->rank, 0);
    // Now only rank 1's NaN is left before index 6.
    if (w.rank() == 0) {
      named[names[3]].mutable_grad().zero_();
    }
    bad = first_nonfinite_grad(*m, w.group().get());
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->name, names[5]);
    EXPECT_EQ(bad->kind, "nan");
    EXPECT_EQ(bad->rank, 1);
    // The norm that clipping computes is non-finite exactly then: the trainer's cheap check.
    EXPECT_FALSE(std::isfinite(clip_grad_norm_(*m, 1.0)));
  });
}
