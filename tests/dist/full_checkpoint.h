#pragma once
// Shared by the tests that move checkpoints between layouts (tensor and expert parallelism):
// a scratch directory every rank of the run agrees on, and the comparison of FULL checkpoints
// tensor by tensor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "fsdpp/state/safetensors.h"

namespace fsdpp::test {

// <tmp>/<prefix>_<MASTER_PORT>/<what>: MASTER_PORT is one per run and the same on every rank;
// `owner` >= 0: that rank's own, for what one process saves alone.
inline std::filesystem::path scratch_dir(const std::string& prefix, const std::string& what,
                                         int owner = -1) {
  const char* port = std::getenv("MASTER_PORT");
  std::string base = ::testing::TempDir() + prefix + "_" + (port ? port : "0");
  if (owner >= 0) base += "_r" + std::to_string(owner);
  return std::filesystem::path(base) / what;
}

// Every tensor of a FULL checkpoint's model and optimizer files, "<file>:<name>".
inline std::map<std::string, at::Tensor> read_full_checkpoint(const std::filesystem::path& dir) {
  std::map<std::string, at::Tensor> out;
  for (const char* file : {"model.safetensors", "optim.safetensors"}) {
    auto f = state::SafetensorsFile::open(dir / file);
    for (const auto& n : f.names()) out[std::string(file) + ":" + n] = f.get(n);
  }
  return out;
}

// The FULL checkpoint in `dir` holds exactly `want`'s tensors, bit for bit.
inline void expect_same_full_checkpoint(const std::map<std::string, at::Tensor>& want,
                                        const std::filesystem::path& dir, const std::string& what) {
  auto got = read_full_checkpoint(dir);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [k, v] : want) {
    ASSERT_TRUE(got.count(k)) << what << ": " << k << " missing";
    EXPECT_TRUE(got.at(k).dtype() == v.dtype() && got.at(k).sizes() == v.sizes() &&
                at::equal(got.at(k), v))
        << what << ": " << k << " differs";
  }
}

}  // namespace fsdpp::test
