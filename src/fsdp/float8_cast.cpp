#include "fsdpp/fsdp/float8_cast.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"

namespace fsdpp {
namespace {

// torchao's EPS: an all-zero tensor gets a finite scale (its data stays zero).
constexpr double kAmaxFloor = 1e-12;

}  // namespace

double float8_max(at::ScalarType float8_dtype) {
  switch (float8_dtype) {
    case at::kFloat8_e4m3fn: return 448.0;
    case at::kFloat8_e5m2: return 57344.0;
    default:
      FSDPP_THROW(Error, "[float8] {} is not a float8 dtype; expected Float8_e4m3fn or Float8_e5m2",
                  c10::toString(float8_dtype));
  }
}

at::Tensor Float8Tensor::dequantize(at::ScalarType dtype) const {
  return data.to(at::kFloat).div(scale).to(dtype);
}

at::Tensor float8_amax(const at::Tensor& x, int64_t reduce_dim) {
  // |x|'s max in x's dtype is exact (no rounding in abs or max), then float32.
  const auto a = x.abs();
  const auto amax = reduce_dim < 0 ? a.max() : std::get<0>(a.max(reduce_dim, /*keepdim=*/true));
  return amax.to(at::kFloat);
}

at::Tensor float8_scale(const at::Tensor& amax, at::ScalarType float8_dtype, bool power_of_two) {
  const double fmax = float8_max(float8_dtype);
  // fp8_max / amax as torchao computes it (a division in float64, not a reciprocal's product).
  auto scale = at::div(at::full({}, fmax, amax.options().dtype(at::kDouble)),
                  amax.to(at::kDouble).clamp_min(kAmaxFloor))
              .to(at::kFloat);
  if (power_of_two) scale = at::exp2(at::floor(at::log2(scale)));
  return scale;
}

at::Tensor float8_cast(const at::Tensor& x, const at::Tensor& scale, at::ScalarType float8_dtype) {
  const double fmax = float8_max(float8_dtype);
  return x.to(at::kFloat).mul(scale).clamp(-fmax, fmax).to(float8_dtype);
}

Float8Tensor to_float8(const at::Tensor& x, at::ScalarType float8_dtype, int64_t reduce_dim,
                       bool power_of_two) {
  FSDPP_CHECK(at::isFloatingType(x.scalar_type()) && !isFloat8Type(x.scalar_type()),
              "[float8] to_float8 of a {} tensor; expected float32, bfloat16 or float16",
              c10::toString(x.scalar_type()));
  const int64_t dim = reduce_dim < 0 ? -1 : at::maybe_wrap_dim(reduce_dim, x.dim());
  const auto scale = float8_scale(float8_amax(x, dim), float8_dtype, power_of_two);
  return {float8_cast(x, scale, float8_dtype), scale, dim};
}

}  // namespace fsdpp
