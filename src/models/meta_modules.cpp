#include "meta_modules.h"

#include <ATen/ATen.h>

#include "fsdpp/fsdp/deferred_init.h"

namespace fsdpp::models::detail {

torch::nn::Linear make_linear(int64_t in, int64_t out, at::Device device) {
  if (!device.is_meta()) return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  // (0, 1): nothing to allocate or draw (a fan-in of 1 keeps kaiming_uniform_'s bound finite).
  torch::nn::Linear l(torch::nn::LinearOptions(1, 0).bias(false));
  rebind_data(l->weight, at::empty({out, in}, at::TensorOptions().device(at::kMeta)));
  l->options.in_features(in).out_features(out);
  return l;
}

torch::nn::Embedding make_embedding(int64_t num, int64_t dim, at::Device device) {
  torch::nn::EmbeddingOptions o(num, dim);
  if (device.is_meta()) o._weight(at::empty({num, dim}, at::TensorOptions().device(at::kMeta)));
  return torch::nn::Embedding(o);
}

void place_on(torch::nn::Module& module, at::Device device) {
  if (!device.is_meta() && !device.is_cpu()) module.to(device);
}

}  // namespace fsdpp::models::detail
