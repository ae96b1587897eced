#include "ranked_gtest.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

namespace fsdpp::test {
namespace {

// Ranks other than 0 print only their failures (rank 0 prints the whole report): an assertion
// that fails on one rank alone is named, not just an exit code.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  // (gtest holds its lock while it reports a result: the test's name is kept from its start.)
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "%s:%d: Failure on rank %d in %s\n%s\n", r.file_name() ? r.file_name() : "?",
                 r.line_number(), rank_, test_.c_str(), r.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int run_tests_on_every_rank(dist::World& world) {
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world.rank()));
  }
  const int rc = RUN_ALL_TESTS();
  auto failed = torch::full({1}, rc == 0 ? 0.0f : 1.0f);
  world.group()->all_reduce(failed, dist::ReduceOp::MAX);
  return failed.item<float>() > 0 ? 1 : 0;
}

}  // namespace fsdpp::test
