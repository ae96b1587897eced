#include "fsdpp/pipeline/blocks.h"

#include <fmt/format.h>

#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"

namespace fsdpp::pipeline {

std::vector<BlockRange> even_ranges(int64_t blocks, int stages) {
  FSDPP_CHECK_AS(ConfigError, stages >= 1 && blocks >= stages,
                 "[pipeline] even_ranges: {} blocks cannot make {} stages of at least one block each; "
                 "expected 1 <= stages <= blocks",
                 blocks, stages);
  std::vector<BlockRange> out;
  int64_t begin = 0;
  for (int s = 0; s < stages; ++s) {
    const int64_t n = blocks / stages + (s < blocks % stages ? 1 : 0);
    out.push_back({begin, begin + n});
    begin += n;
  }
  return out;
}

BlockStageImpl::BlockStageImpl(const torch::nn::Sequential& model, BlockRange range) : range_(range) {
  FSDPP_CHECK_AS(ConfigError, range.begin >= 0 && range.begin < range.end &&
                                  range.end <= static_cast<int64_t>(model->size()),
                 "[pipeline] a stage of blocks [{}, {}) of a model of {} blocks; expected 0 <= begin < end <= {}",
                 range.begin, range.end, model->size(), model->size());
  const auto names = model->named_children();
  blocks_.reserve(static_cast<size_t>(range.end - range.begin));
  for (int64_t i = range.begin; i < range.end; ++i) {
    blocks_.push_back(*(model->begin() + i));  // a shallow copy: the same module
    register_module(names[static_cast<size_t>(i)].key(), blocks_.back().ptr());
  }
  for (auto& b : blocks_) calls_.push_back(Call{&b});
}

at::Tensor BlockStageImpl::forward(at::Tensor x) {
  for (size_t i = 0; i < calls_.size(); ++i) x = detail::forward_as(*blocks_[i].ptr(), calls_[i], x);
  return x;
}

std::vector<BlockStage> split_blocks(const torch::nn::Sequential& model, const std::vector<BlockRange>& ranges) {
  const auto n = static_cast<int64_t>(model->size());
  FSDPP_CHECK_AS(ConfigError, !ranges.empty(), "[pipeline] split_blocks: no ranges; expected one per stage");
  int64_t next = 0;
  for (size_t s = 0; s < ranges.size(); ++s) {
    const auto& r = ranges[s];
    FSDPP_CHECK_AS(ConfigError, r.begin == next && r.end > r.begin && r.end <= n,
                   "[pipeline] split_blocks: stage {} has blocks [{}, {}), but the stages must cover the "
                   "model's {} blocks in order, each non-empty: stage {} should start at block {}",
                   s, r.begin, r.end, n, s, next);
    next = r.end;
  }
  FSDPP_CHECK_AS(ConfigError, next == n,
                 "[pipeline] split_blocks: the stages end at block {}, but the model has {} blocks; "
                 "blocks [{}, {}) are in no stage",
                 next, n, next, n);
  std::vector<BlockStage> out;
  for (const auto& r : ranges) out.emplace_back(model, r);
  return out;
}

}  // namespace fsdpp::pipeline
