#include "fsdpp/data/tensor_sampler.h"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/index_select.h>

#include "fsdpp/common/error.h"

namespace fsdpp::data {

namespace {

// The tensors, checked: at least one, each with the same number of rows (examples).
std::vector<at::Tensor> checked(std::vector<at::Tensor> tensors) {
  FSDPP_CHECK_AS(ConfigError, !tensors.empty(),
                 "[data] a tensor dataset needs at least one tensor; got none");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    FSDPP_CHECK_AS(ConfigError, t.defined() && t.dim() >= 1,
                   "[data] tensor {} of the dataset has no first dimension; expected one "
                   "example per row of dimension 0",
                   i);
    FSDPP_CHECK_AS(ConfigError, t.size(0) == tensors[0].size(0),
                   "[data] tensor {} of the dataset has {} rows, tensor 0 has {}; expected one "
                   "row per example in every tensor",
                   i, t.size(0), tensors[0].size(0));
  }
  return tensors;
}

}  // namespace

TensorSampler::TensorSampler(std::vector<at::Tensor> tensors, const ShareOptions& share)
    : tensors_(checked(std::move(tensors))), stream_(tensors_[0].size(0), share, "examples") {
  FSDPP_CHECK_AS(ConfigError, stream_.per_rank() >= 1,
                 "[data] the tensor dataset has {} examples, fewer than world_size={}; expected "
                 "at least one example per rank",
                 num_examples(), share.world_size);
}

std::vector<at::Tensor> TensorSampler::next_batch(int64_t batch_size) {
  FSDPP_CHECK_AS(ConfigError, batch_size >= 1,
                 "[data] batch_size={} is not positive; expected >= 1", batch_size);
  std::vector<int64_t> picked(static_cast<size_t>(batch_size));
  for (auto& i : picked) i = stream_.next();
  const auto index =
      at::from_blob(picked.data(), {batch_size}, at::TensorOptions().dtype(at::kLong)).clone();
  std::vector<at::Tensor> batch;
  batch.reserve(tensors_.size());
  for (const auto& t : tensors_) batch.push_back(t.index_select(0, index.to(t.device())));
  return batch;
}

}  // namespace fsdpp::data
