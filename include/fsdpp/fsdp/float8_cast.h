#pragma once
// Float8 quantization with dynamic scales, the numerics of torchao's float8 training
// (torchao/float8: hp_tensor_to_float8_dynamic, amax_to_scale, to_fp8_saturated):
//
//   amax  = max |x|                       (over the whole tensor, or along one dim: rowwise)
//   scale = fp8_max / max(amax, 1e-12)    (in float64, then float32; fp8_max 448 for e4m3fn,
//                                          57344 for e5m2)
//   data  = clamp(float32(x) * scale, -fp8_max, fp8_max) cast to float8
//
// so that data / scale is x to float8's precision, with the largest |x| at fp8_max. The clamp
// makes the cast saturate: LibTorch's casts to float8 do not (448.5 -> e4m3fn is NaN, 60000 ->
// e5m2 is inf). Rowwise scales may be rounded down to a power of two (torchao's rowwise recipe
// does: the scaled values are then exact multiples, at up to half the range). The same ATen ops
// on every device, so that the CPU computes what a GPU does, bit for bit (tests/unit/test_float8).
#include <ATen/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace fsdpp {

// The largest finite value of a float8 dtype: 448 for Float8_e4m3fn, 57344 for Float8_e5m2.
// Any other dtype is an Error.
double float8_max(at::ScalarType float8_dtype);

// A tensor quantized to float8 with its scale: value ~ data / scale. `scale` is float32, a
// 0-d tensor (tensorwise), or of data's shape with size 1 along reduce_dim (rowwise: one scale
// per slice across reduce_dim, broadcasting against data).
struct Float8Tensor {
  at::Tensor data;   // Float8_e4m3fn or Float8_e5m2
  at::Tensor scale;  // float32
  // The dim the amax was taken along; -1: one scale for the whole tensor. A 2-D (rows, cols)
  // tensor with reduce_dim 1 has one scale per row.
  int64_t reduce_dim = -1;

  // data / scale in `dtype` (float32 arithmetic).
  at::Tensor dequantize(at::ScalarType dtype = at::kFloat) const;
};

// max |x| as float32: 0-d, or reduced along `reduce_dim` (kept, size 1) when reduce_dim >= 0.
at::Tensor float8_amax(const at::Tensor& x, int64_t reduce_dim = -1);

// fp8_max / max(amax, 1e-12) computed in float64, returned float32 (amax's shape); rounded down
// to a power of two when asked.
at::Tensor float8_scale(const at::Tensor& amax, at::ScalarType float8_dtype,
                        bool power_of_two = false);

// x quantized to `float8_dtype` with the scale of its amax: one for the whole tensor
// (reduce_dim = -1), or one per slice when the amax is reduced along reduce_dim (a 2-D x with
// reduce_dim = 1: one scale per row).
Float8Tensor to_float8(const at::Tensor& x, at::ScalarType float8_dtype, int64_t reduce_dim = -1,
                       bool power_of_two = false);

// x quantized with a given float32 scale (0-d or broadcasting against x): the saturating cast.
at::Tensor float8_cast(const at::Tensor& x, const at::Tensor& scale, at::ScalarType float8_dtype);

}  // namespace fsdpp
