#pragma once
// Private to src/models: what fsdpp's decoders (llama.cpp, qwen3_moe.cpp) share below the level
// of a module.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace fsdpp::models::detail {

// (B,T,Hkv,D) -> (B,T,Hkv*n_rep,D): kv head j serves query heads j*n_rep .. (j+1)*n_rep-1.
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep);

// torch::nn::Linear and Embedding draw their default init from the global generator; a model's
// weights come from its own generator, so its constructor puts the global one back as it found
// it. The generator's mutex guards against ranks-as-threads building models at the same time.
class GlobalRngRestorer {
 public:
  GlobalRngRestorer();
  ~GlobalRngRestorer();
  GlobalRngRestorer(const GlobalRngRestorer&) = delete;
  GlobalRngRestorer& operator=(const GlobalRngRestorer&) = delete;

 private:
  at::Tensor state_;
};

}  // namespace fsdpp::models::detail
