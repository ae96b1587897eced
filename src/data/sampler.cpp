#include "fsdpp/data/sampler.h"

#include <ATen/ops/empty.h>

#include <numeric>

#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

// SplitMix64: a tiny generator whose output is fixed by its definition (std::shuffle and the
// std distributions differ between standard libraries, and so would the epochs).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, n) without modulo bias.
uint64_t uniform_below(uint64_t n, uint64_t& state) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const uint64_t r = splitmix64(state);
    if (r >= threshold) return r % n;
  }
}

// Window i covers tokens [i*T, i*T + T + 1), so it needs i*T + T + 1 <= n.
int64_t windows_in(const TokenDataset& data, const SamplerOptions& options) {
  FSDPP_CHECK_AS(ConfigError, options.seq_len >= 1,
                 "[data] sampler seq_len={} is not positive; expected >= 1", options.seq_len);
  return data.size() > 0 ? (data.size() - 1) / options.seq_len : 0;
}

}  // namespace

SamplerStream::SamplerStream(int64_t count, const ShareOptions& share, std::string items)
    : count_(count), share_(share), items_(std::move(items)) {
  FSDPP_CHECK_AS(ConfigError, share_.world_size >= 1,
                 "[data] sampler world_size={} is not positive; expected >= 1", share_.world_size);
  FSDPP_CHECK_AS(ConfigError, share_.rank >= 0 && share_.rank < share_.world_size,
                 "[data] sampler rank={} is out of range; expected 0 <= rank < world_size={}",
                 share_.rank, share_.world_size);
  per_rank_ = count_ / share_.world_size;
}

std::vector<int64_t> SamplerStream::order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(count_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (share_.shuffle) {
    uint64_t state = share_.seed ^ (0xd1b54a32d192ed03ULL * static_cast<uint64_t>(epoch + 1));
    for (size_t i = order.size(); i > 1; --i) {  // Fisher-Yates
      std::swap(order[i - 1], order[uniform_below(i, state)]);
    }
  }
  std::vector<int64_t> mine(static_cast<size_t>(per_rank_));
  for (int64_t k = 0; k < per_rank_; ++k) mine[k] = order[k * share_.world_size + share_.rank];
  return mine;
}

int64_t SamplerStream::next() {
  FSDPP_CHECK(per_rank_ >= 1, "[data] sampler has no {} for rank {}", items_, share_.rank);
  if (state_.position == per_rank_) {
    ++state_.epoch;
    state_.position = 0;
  }
  if (state_.epoch != cached_epoch_) {
    cached_order_ = order(state_.epoch);
    cached_epoch_ = state_.epoch;
  }
  return cached_order_[state_.position++];
}

void SamplerStream::load_state(const SamplerState& state) {
  FSDPP_CHECK_AS(ConfigError,
                 state.epoch >= 0 && state.position >= 0 && state.position <= per_rank_,
                 "[data] sampler state (epoch={}, position={}) is out of range; expected epoch "
                 ">= 0 and 0 <= position <= {} {} per rank",
                 state.epoch, state.position, per_rank_, items_);
  state_ = state;
}

DistributedSampler::DistributedSampler(TokenDataset data, SamplerOptions options)
    : data_(std::move(data)),
      options_(options),
      num_windows_(windows_in(data_, options_)),
      stream_(num_windows_, options_.share, "windows") {
  FSDPP_CHECK_AS(ConfigError, stream_.per_rank() >= 1,
                 "[data] {} tokens make {} windows of seq_len+1={} tokens, fewer than "
                 "world_size={}; expected at least one window per rank (use more data or a "
                 "shorter seq_len)",
                 data_.size(), num_windows_, options_.seq_len + 1, options_.share.world_size);
}

std::vector<int64_t> DistributedSampler::window_starts(int64_t epoch) const {
  auto mine = stream_.order(epoch);
  for (auto& w : mine) w *= options_.seq_len;
  return mine;
}

std::vector<int64_t> DistributedSampler::plan_batch(int64_t batch_size) {
  FSDPP_CHECK_AS(ConfigError, batch_size >= 1,
                 "[data] batch_size={} is not positive; expected >= 1", batch_size);
  std::vector<int64_t> starts(static_cast<size_t>(batch_size));
  for (auto& start : starts) start = stream_.next() * options_.seq_len;
  return starts;
}

TokenBatch DistributedSampler::load_batch(const std::vector<int64_t>& starts) const {
  const int64_t T = options_.seq_len;
  const auto batch_size = static_cast<int64_t>(starts.size());
  auto windows = at::empty({batch_size, T + 1}, at::TensorOptions().dtype(at::kLong));  // (B,T+1)
  for (int64_t b = 0; b < batch_size; ++b) {
    windows[b].copy_(data_.slice(starts[b], starts[b] + T + 1));
  }
  return {windows.narrow(1, 0, T).contiguous(), windows.narrow(1, 1, T).contiguous(), {}};
}

std::pair<at::Tensor, at::Tensor> DistributedSampler::next_batch(int64_t batch_size) {
  auto b = load_batch(plan_batch(batch_size));
  return {b.inputs, b.targets};
}

}  // namespace fsdpp::data
