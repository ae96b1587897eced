#pragma once
// The main of a gtest binary that fsdpp-run starts on N ranks (fsdpp_dist_tests,
// fsdpp_gpu_tests): every rank runs the same tests in the same order, so that their collectives
// line up; only rank 0 prints gtest's report (the others their failures); the ranks agree on
// the result, so that one rank's failure fails every rank's exit code.

#include "fsdpp/dist/world.h"

namespace fsdpp::test {

// Call after ::testing::InitGoogleTest; returns the process's exit code.
int run_tests_on_every_rank(dist::World& world);

}  // namespace fsdpp::test
