#pragma once
// Private to src/models: LibTorch's modules made on a device, the meta device included, for the
// models' constructors. torch::nn::Linear allocates its weight and draws it from the global
// generator when it is made and has no device option, so on the meta device it is made empty
// and its weight given the shape without storage (fsdpp/fsdp/deferred_init.h).

#include <c10/core/Device.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

namespace fsdpp::models::detail {

// y = x W^T without bias; W (out, in).
torch::nn::Linear make_linear(int64_t in, int64_t out, at::Device device);
// A (num, dim) table.
torch::nn::Embedding make_embedding(int64_t num, int64_t dim, at::Device device);

// Every parameter and buffer made on the CPU (what LibTorch's modules do) moved to `device`
// when it is another device with storage; on the meta device the models make their parameters
// without storage themselves.
void place_on(torch::nn::Module& module, at::Device device);

}  // namespace fsdpp::models::detail
