#pragma once
// Float8 training of a bias-free linear y = x W^T (torchao's Float8Linear, the recipes
// torchtitan's `float8` converter selects): each of its three GEMMs with float8 operands through
// at::_scaled_mm, dynamic scales (fsdp/float8_cast.h), output and gradients in x's dtype.
//
//   forward      y  = x  W^T    x, W   e4m3                    fast accumulation
//   grad input   dx = dy W      dy e5m2 (tensorwise) / e4m3 (rowwise), W e4m3
//   grad weight  dW = dy^T x    dy e5m2 / e4m3, x e4m3
//
// TENSORWISE: one scale per tensor; the forward's float8 x and W are what backward keeps (half
// of bf16's bytes) and reuses, transposed. ROWWISE: one scale per row of each GEMM operand along
// its contracted dim (x and W along K forward; dy along N and W along N for dx; dy and x along M
// for dW), powers of two, all e4m3; backward keeps x and W as given and quantizes them again
// along its own dims (torchao's rowwise does the same).
//
// _scaled_mm wants its first operand row-major and its second column-major; this file lays them
// out so. On the CPU LibTorch's _scaled_mm takes tensorwise scales only (it computes the float8
// product in float32); rowwise products there multiply the dequantized operands in float32, the
// same values to float32 rounding. What is quantized, and how, is the same on every device.
#include <ATen/Tensor.h>

#include <cstdint>
#include <string_view>

namespace fsdpp {

enum class Float8Recipe { OFF, TENSORWISE, ROWWISE };

// "off", "tensorwise", "rowwise".
std::string_view to_string(Float8Recipe recipe);

// Which linears a conversion turns to float8 (torchao's convert_to_float8_training filters).
enum class Float8Filter {
  // torchao's auto filter for the recipe (measured on H100s: smaller GEMMs ran slower in
  // float8 than in bf16), torchao 0.17's, with its (N, K) = weight.shape = (out, in) naming:
  // TENSORWISE skips K <= 4096 with N <= 1024; ROWWISE skips N <= 2048, K <= 1024, and
  // N <= 4096 with K <= 2048.
  AUTO,
  // Every linear offered whose dims are multiples of 16 (what the float8 GEMM requires).
  ALL,
};

// "auto", "all".
std::string_view to_string(Float8Filter filter);

// Whether a weight of (out_features, in_features) converts under the recipe and filter: never
// with OFF; never when either dim is not a multiple of 16.
bool float8_converts(int64_t out_features, int64_t in_features, Float8Recipe recipe,
                     Float8Filter filter);

// x (..., K) W^T with W (N, K) -> (..., N) in x's dtype, through float8 GEMMs in forward and
// backward (recipe TENSORWISE or ROWWISE); autograd gives x and W their gradients (dW in W's
// dtype). The rows of x flattened must be a multiple of 16 for a CUDA GEMM (pad the batch).
at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& weight, Float8Recipe recipe);

}  // namespace fsdpp
