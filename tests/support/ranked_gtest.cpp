#include "ranked_gtest.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace fsdpp::test {

int run_tests_on_every_rank(dist::World& world) {
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  auto failed = torch::full({1}, rc == 0 ? 0.0f : 1.0f);
  world.group()->all_reduce(failed, dist::ReduceOp::MAX);
  return failed.item<float>() > 0 ? 1 : 0;
}

}  // namespace fsdpp::test
