#pragma once
// Private to src/models: what fsdpp's decoders (llama.cpp, qwen3_moe.cpp) share below the level
// of a module.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace fsdpp::models::detail {

// (B,T,Hkv,D) -> (B,T,Hkv*n_rep,D): kv head j serves query heads j*n_rep .. (j+1)*n_rep-1.
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep);

// RoPE's rotation of the pairs (x0, x1) = xc[..., 0], xc[..., 1] of xc (B,T,H,D/2,2) by the
// angles whose cos c and sin s (broadcast against (B,T,H,D/2)) are given, as (B,T,H,D):
// (x0 c - x1 s, x0 s + x1 c). rotate_pairs in real ops (the CPU's, bit-equal to Meta's reference
// formula); rotate_pairs_complex as one complex multiply (x0 + i x1)(c + i s): a GPU's, one
// kernel forward and one backward where the real ops take about ten (measured on an H200: RoPE
// was a sixth of a 1B Llama's step). The two agree to float32 rounding (a fused multiply-add).
at::Tensor rotate_pairs(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s);
at::Tensor rotate_pairs_complex(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s);

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
