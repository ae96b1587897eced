// BatchLoader (training.dataloader_num_workers): background threads give exactly the sampler's
// batches in the sampler's order, its state is that of the batches taken, errors arrive in
// their place, and it stops cleanly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/data/batch_loader.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/token_dataset.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/state/atomic_dir.h"

using namespace fsdpp::data;
namespace fs = std::filesystem;

namespace {

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, which crashes.
using fsdpp::state::remove_tree;

class BatchLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("fsdpp_test_loader_{}_{}", ::getpid(), info->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
    // 4000 bytes of varied text: every window differs from every other.
    std::string text;
    for (int i = 0; i < 4000; ++i) text += static_cast<char>('!' + (i * 7919 + i / 13) % 90);
    std::ofstream(dir_ / "t.txt", std::ios::binary) << text;
    data_.emplace(TokenDataset::open(dir_ / "t.txt", tok_));
  }
  void TearDown() override {
    data_.reset();
    remove_tree(dir_);
  }

  ByteTokenizer tok_;
  fs::path dir_;
  std::optional<TokenDataset> data_;
};

const SamplerOptions kOpts{.seq_len = 16, .share = {.rank = 1, .world_size = 2, .seed = 5}};

}  // namespace

TEST_F(BatchLoaderTest, WorkersGiveTheSameBatchesInTheSameOrderAsNone) {
  // 124 windows per rank: 60 batches of 5 run through 2 epochs and into a third.
  constexpr int kBatches = 60;
  DistributedSampler ref_sampler(*data_, kOpts);
  std::vector<std::pair<at::Tensor, at::Tensor>> ref;
  std::vector<SamplerState> ref_states;
  for (int i = 0; i < kBatches; ++i) {
    ref.push_back(ref_sampler.next_batch(5));
    ref_states.push_back(ref_sampler.state());
  }
  ASSERT_EQ(ref_states.back().epoch, 2);
  for (int workers : {0, 1, 2, 4}) {
    for (int prefetch : {1, 3}) {
      SCOPED_TRACE(fmt::format("num_workers={} prefetch_factor={}", workers, prefetch));
      DistributedSampler sampler(*data_, kOpts);
      BatchLoader loader(sampler, {.batch_size = 5, .num_workers = workers,
                                   .prefetch_factor = prefetch});
      EXPECT_EQ(loader.state(), SamplerState{});
      for (int i = 0; i < kBatches; ++i) {
        auto [x, y] = loader.next();
        ASSERT_TRUE(torch::equal(x, ref[i].first)) << "batch " << i;
        ASSERT_TRUE(torch::equal(y, ref[i].second)) << "batch " << i;
        // The state of the batches taken, not of those made ahead.
        ASSERT_EQ(loader.state(), ref_states[i]) << "batch " << i;
      }
    }
  }
}

TEST_F(BatchLoaderTest, ResumingFromItsStateContinuesTheStream) {
  DistributedSampler sampler(*data_, kOpts);
  SamplerState saved;
  std::pair<at::Tensor, at::Tensor> after;
  {
    BatchLoader loader(sampler, {.batch_size = 7, .num_workers = 3, .prefetch_factor = 2});
    for (int i = 0; i < 20; ++i) loader.next();  // the workers are ahead by now
    saved = loader.state();
    after = loader.next();
  }
  EXPECT_EQ(saved, (SamplerState{.epoch = 1, .position = 16}));  // 140 windows, 124 per epoch
  DistributedSampler resumed(*data_, kOpts);
  resumed.load_state(saved);
  BatchLoader loader(resumed, {.batch_size = 7, .num_workers = 2});
  auto [x, y] = loader.next();
  EXPECT_TRUE(torch::equal(x, after.first));
  EXPECT_TRUE(torch::equal(y, after.second));
}

TEST_F(BatchLoaderTest, AWorkersErrorArrivesInItsPlaceAndTheLoaderStops) {
  DistributedSampler sampler(*data_, {.seq_len = 16, .share = {.rank = 0, .world_size = 1, .shuffle = false}});
  // Batches of 10 windows in file order: batch k reads tokens [160k, 160k + 161). The token
  // file (2 bytes a token) cut to its first 1000 tokens leaves batches 0-5 whole and fails
  // batch 6 (tokens 960-1120).
  BatchLoader loader(sampler, {.batch_size = 10, .num_workers = 4, .prefetch_factor = 1});
  const auto [x0, y0] = loader.next();
  EXPECT_TRUE(torch::equal(x0[0], data_->slice(0, 16)));
  // At most 4 batches are planned beyond those returned: batch 6 is read after the cut.
  const auto size = fs::file_size(data_->cache_path());
  fs::resize_file(data_->cache_path(), size - (data_->size() - 1000) * 2);
  std::string message;
  int returned = 1;
  try {
    for (; returned < 100; ++returned) loader.next();
  } catch (const fsdpp::Error& e) {
    message = e.what();
  }
  EXPECT_EQ(returned, 6);
  EXPECT_NE(message.find("[data] token cache '" + data_->cache_path().string()), std::string::npos)
      << message;
  EXPECT_EQ(loader.state(), (SamplerState{.epoch = 0, .position = 60}));  // batches 0-5
  // The destructor joins the worker that stopped and those still waiting, at once.
}

TEST_F(BatchLoaderTest, StopsPromptlyWhileWorkersWaitForRoom) {
  DistributedSampler sampler(*data_, kOpts);
  const auto t0 = std::chrono::steady_clock::now();
  {
    BatchLoader loader(sampler, {.batch_size = 4, .num_workers = 4, .prefetch_factor = 2});
    loader.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the workers fill up and wait
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);
  // And while an exception unwinds the code that owns it.
  EXPECT_THROW(
      {
        BatchLoader loader(sampler, {.batch_size = 4, .num_workers = 2});
        loader.next();
        throw std::runtime_error("the step failed");
      },
      std::runtime_error);
}

TEST_F(BatchLoaderTest, RefusesBadOptions) {
  DistributedSampler sampler(*data_, kOpts);
  EXPECT_THROW(BatchLoader(sampler, {.batch_size = 0}), fsdpp::ConfigError);
  EXPECT_THROW(BatchLoader(sampler, {.batch_size = 2, .num_workers = -1}), fsdpp::ConfigError);
  EXPECT_THROW(BatchLoader(sampler, {.batch_size = 2, .num_workers = 1, .prefetch_factor = 0}),
               fsdpp::ConfigError);
}

TEST_F(BatchLoaderTest, NextWaitsAtMostItsTimeout) {
  // A batch of 20000 windows takes the worker far longer than 1 ms to read.
  DistributedSampler sampler(*data_, kOpts);
  BatchLoader loader(sampler, {.batch_size = 20000, .num_workers = 1,
                               .timeout = std::chrono::milliseconds(1)});
  std::string message;
  try {
    loader.next();
  } catch (const fsdpp::Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("[data] batch 0 was not ready after 1 ms from 1 loader threads"),
            std::string::npos) << message;
  EXPECT_EQ(loader.state(), SamplerState{});  // nothing was taken
}
