#include "fsdpp/fsdp/float8_linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/float8_cast.h"

namespace fsdpp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr auto kE4M3 = at::kFloat8_e4m3fn;
constexpr auto kE5M2 = at::kFloat8_e5m2;

// A GEMM operand quantized for _scaled_mm: data laid out as the GEMM needs it and its scale
// shaped as _scaled_mm's (0-d, (M,1) for the first operand, (1,N) for the second).
struct Operand {
  at::Tensor data, scale;
};

// (a / sa) (b / sb) in `out` dtype: a (M,K) row-major, b (K,N) column-major. _scaled_mm takes
// the inverse scales. LibTorch's CPU _scaled_mm takes 0-d scales only: rowwise there multiplies
// the dequantized operands in float32.
at::Tensor scaled_mm(const Operand& a, const Operand& b, at::ScalarType out, bool fast_accum) {
  if (a.data.is_cpu() && (a.scale.dim() > 0 || b.scale.dim() > 0)) {
    return a.data.to(at::kFloat).div(a.scale).mm(b.data.to(at::kFloat).div(b.scale)).to(out);
  }
  return at::_scaled_mm(a.data, b.data, a.scale.reciprocal(), b.scale.reciprocal(),
                        /*bias=*/std::nullopt, /*scale_result=*/std::nullopt, out, fast_accum);
}

at::Tensor row_major(const at::Tensor& t) { return t.contiguous(); }
at::Tensor column_major(const at::Tensor& t) { return t.t().contiguous().t(); }

// x2 (M,K) W^T with both operands quantized along K (rowwise) or whole (tensorwise).
at::Tensor forward_gemm(const Float8Tensor& xq, const Float8Tensor& wq, at::ScalarType out) {
  // W (N,K) quantized along K: its scale (N,1) becomes the second operand's (1,N).
  const auto wscale = wq.reduce_dim < 0 ? wq.scale : wq.scale.t();
  return scaled_mm({row_major(xq.data), xq.scale}, {wq.data.t(), wscale}, out, /*fast_accum=*/true);
}

struct Float8LinearFn : public torch::autograd::Function<Float8LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            int64_t recipe_id) {
    const auto recipe = static_cast<Float8Recipe>(recipe_id);
    const auto x2 = x.reshape({-1, x.size(-1)});
    const bool rowwise = recipe == Float8Recipe::ROWWISE;
    const int64_t along_k = rowwise ? 1 : -1;
    const auto xq = to_float8(x2, kE4M3, along_k, rowwise);
    const auto wq = to_float8(weight, kE4M3, along_k, rowwise);
    auto out_shape = x.sizes().vec();
    out_shape.back() = weight.size(0);
    ctx->saved_data["recipe"] = recipe_id;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["x_shape"] = x.sizes().vec();
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    if (rowwise) {
      ctx->save_for_backward({x2, weight});  // quantized again along backward's dims
    } else {
      ctx->save_for_backward({xq.data, xq.scale, wq.data, wq.scale});  // reused, transposed
    }
    return forward_gemm(xq, wq, x.scalar_type()).view(out_shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto recipe = static_cast<Float8Recipe>(ctx->saved_data["recipe"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto x_shape = ctx->saved_data["x_shape"].toIntVector();
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    const auto g2 = grads[0].reshape({-1, grads[0].size(-1)});  // (M,N)
    at::Tensor dx, dw;
    if (recipe == Float8Recipe::TENSORWISE) {
      const auto gq = to_float8(g2, kE5M2);
      const Operand x{saved[0], saved[1]}, w{saved[2], saved[3]};
      // dx (M,K) = dy (M,N) W (N,K); dW (N,K) = dy^T (N,M) x (M,K).
      if (ctx->needs_input_grad(0)) {
        dx = scaled_mm({row_major(gq.data), gq.scale}, {column_major(w.data), w.scale}, x_dtype, false);
      }
      if (ctx->needs_input_grad(1)) {
        dw = scaled_mm({row_major(gq.data.t()), gq.scale}, {column_major(x.data), x.scale}, x_dtype,
                       false);
      }
    } else {
      const auto &x2 = saved[0], &weight = saved[1];
      if (ctx->needs_input_grad(0)) {  // contracted over N: dy along N, W along N
        const auto gq = to_float8(g2, kE4M3, 1, true);
        const auto wq = to_float8(weight, kE4M3, 0, true);
        dx = scaled_mm({row_major(gq.data), gq.scale}, {column_major(wq.data), wq.scale}, x_dtype,
                       false);
      }
      if (ctx->needs_input_grad(1)) {  // contracted over M: dy and x along M
        const auto gq = to_float8(g2, kE4M3, 0, true);
        const auto xq = to_float8(x2, kE4M3, 0, true);
        dw = scaled_mm({row_major(gq.data.t()), gq.scale.t()}, {column_major(xq.data), xq.scale},
                       x_dtype, false);
      }
    }
    if (dx.defined()) dx = dx.view(x_shape);
    if (dw.defined()) dw = dw.to(w_dtype);
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

std::string_view to_string(Float8Recipe recipe) {
  switch (recipe) {
    case Float8Recipe::OFF: return "off";
    case Float8Recipe::TENSORWISE: return "tensorwise";
    case Float8Recipe::ROWWISE: return "rowwise";
  }
  return "?";
}

std::string_view to_string(Float8Filter filter) {
  return filter == Float8Filter::AUTO ? "auto" : "all";
}

bool float8_converts(int64_t out_features, int64_t in_features, Float8Recipe recipe,
                     Float8Filter filter) {
  if (recipe == Float8Recipe::OFF) return false;
  if (out_features % 16 != 0 || in_features % 16 != 0) return false;
  if (filter == Float8Filter::ALL) return true;
  // torchao 0.17's auto filters (float8_linear_utils.py), with their names: (N, K) =
  // weight.shape = (out, in).
  const int64_t n = out_features, k = in_features;
  if (recipe == Float8Recipe::TENSORWISE) return !(k <= 4096 && n <= 1024);
  return !(n <= 2048 || k <= 1024 || (n <= 4096 && k <= 2048));
}

at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& weight, Float8Recipe recipe) {
  FSDPP_CHECK(recipe != Float8Recipe::OFF, "[float8] float8_linear with recipe off");
  FSDPP_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
              "[float8] float8_linear: x {} against weight {}; expected x (..., K), W (N, K)",
              x.sizes(), weight.sizes());
  return Float8LinearFn::apply(x, weight, static_cast<int64_t>(recipe));
}

}  // namespace fsdpp
