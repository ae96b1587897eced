// Float8 training's numerics (fsdp/float8_cast.h, fsdp/float8_linear.h) against a quantizer
// written another way (per element, with c10's scalar float8 conversions and double arithmetic),
// the filter against torchao's table, and the conversion of fsdpp's decoders
// (models/float8_convert.h): which projections it takes, and training close to full precision.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/float8_cast.h"
#include "fsdpp/fsdp/float8_linear.h"
#include "fsdpp/models/float8_convert.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"

using namespace fsdpp;

namespace {

at::Tensor randn(at::IntArrayRef shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::kFloat);
}

// One float through the scalar conversion of a float8 type and back.
float round_trip(float v, at::ScalarType dtype) {
  if (dtype == at::kFloat8_e4m3fn) return static_cast<float>(c10::Float8_e4m3fn(v));
  return static_cast<float>(c10::Float8_e5m2(v));
}

// The reference quantizer of a 2-D tensor: per element with std:: maths. reduce_dim -1: one
// scale; 1: one per row; 0: one per column. Returns the float8 values (as float) and the scales
// (one per group, broadcasting as the library's).
struct RefQuant {
  at::Tensor values;  // float32, the float8 data's values
  at::Tensor scale;   // float32
};

RefQuant ref_quantize(const at::Tensor& x_in, at::ScalarType dtype, int64_t reduce_dim,
                      bool power_of_two) {
  const double fmax = dtype == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  const auto x = x_in.to(at::kFloat).contiguous();
  const int64_t R = x.size(0), C = x.size(1);
  auto xa = x.accessor<float, 2>();
  auto values = at::empty({R, C}, at::kFloat);
  auto va = values.accessor<float, 2>();
  const int64_t groups = reduce_dim < 0 ? 1 : (reduce_dim == 1 ? R : C);
  auto scales = at::empty({groups}, at::kFloat);
  auto in_group = [&](int64_t g, int64_t r, int64_t c) {
    return reduce_dim < 0 || (reduce_dim == 1 ? r == g : c == g);
  };
  for (int64_t g = 0; g < groups; ++g) {
    float amax = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        if (in_group(g, r, c)) amax = std::max(amax, std::fabs(xa[r][c]));
    float scale = static_cast<float>(fmax / std::max(static_cast<double>(amax), 1e-12));
    if (power_of_two) scale = std::exp2(std::floor(std::log2(scale)));
    scales[g] = scale;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        if (!in_group(g, r, c)) continue;
        const float v = std::clamp(xa[r][c] * scale, static_cast<float>(-fmax), static_cast<float>(fmax));
        va[r][c] = round_trip(v, dtype);
      }
  }
  if (reduce_dim == 1) return {values, scales.view({R, 1})};
  if (reduce_dim == 0) return {values, scales.view({1, C})};
  return {values, scales.reshape(std::vector<int64_t>{})};  // view({}) would be view(kByte)
}

at::Tensor ref_dequantize(const at::Tensor& x, at::ScalarType dtype, int64_t reduce_dim,
                          bool power_of_two) {
  const auto q = ref_quantize(x, dtype, reduce_dim, power_of_two);
  return q.values.to(at::kDouble).div(q.scale.to(at::kDouble));
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  const auto bd = b.to(at::kDouble);
  return (a.to(at::kDouble) - bd).norm().item<double>() / bd.norm().item<double>();
}

double max_rel(const at::Tensor& a, const at::Tensor& ref) {
  const auto r = ref.to(at::kDouble);
  return (a.to(at::kDouble) - r).abs().max().item<double>() / r.abs().max().item<double>();
}

}  // namespace

TEST(Float8Cast, MatchesAScalarReference) {
  // Rows of very different magnitudes, so that per-row scales differ from the tensor's.
  auto x = randn({24, 40}, 1) * at::logspace(-3, 3, 24).view({24, 1});
  for (auto dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
    for (int64_t dim : {-1, 0, 1}) {
      for (bool pow2 : {false, true}) {
        for (auto in : {x, x.to(at::kBFloat16)}) {
          const auto q = to_float8(in, dtype, dim, pow2);
          const auto ref = ref_quantize(in, dtype, dim, pow2);
          SCOPED_TRACE(std::string(c10::toString(dtype)) + " dim " + std::to_string(dim) +
                       (pow2 ? " pow2 " : " ") + c10::toString(in.scalar_type()));
          EXPECT_EQ(q.data.scalar_type(), dtype);
          EXPECT_EQ(q.reduce_dim, dim);
          EXPECT_TRUE(at::equal(q.scale, ref.scale));
          EXPECT_TRUE(at::equal(q.data.to(at::kFloat), ref.values));
          // The largest |x| of each group lands on the format's largest value (within its
          // upper half, its lower end included, with power-of-two scales).
          const auto top = q.data.to(at::kFloat).abs();
          const auto top_max = dim < 0 ? top.max() : std::get<0>(top.max(dim));
          if (pow2) {
            EXPECT_TRUE(at::all(top_max >= float8_max(dtype) / 2).item<bool>());
          } else {
            EXPECT_TRUE(at::all(top_max == float8_max(dtype)).item<bool>());
          }
        }
      }
    }
  }
}

TEST(Float8Cast, SaturatesWhereLibTorchsCastDoesNot) {
  const auto x = at::tensor({1000.f, -1000.f, 0.3f, 70000.f});
  const auto one = at::ones({}, at::kFloat);
  // LibTorch's own cast: out of range is NaN (e4m3fn) and inf (e5m2), hence the clamp.
  EXPECT_TRUE(at::isnan(x.to(at::kFloat8_e4m3fn).to(at::kFloat)[0]).item<bool>());
  EXPECT_TRUE(at::isinf(x.to(at::kFloat8_e5m2).to(at::kFloat)[3]).item<bool>());
  const auto e4 = float8_cast(x, one, at::kFloat8_e4m3fn).to(at::kFloat);
  EXPECT_TRUE(at::equal(e4, at::tensor({448.f, -448.f, 0.3125f, 448.f})));
  const auto e5 = float8_cast(x, one, at::kFloat8_e5m2).to(at::kFloat);
  EXPECT_EQ(e5[3].item<float>(), 57344.f);
  EXPECT_EQ(e5[0].item<float>(), 1024.f);
}

TEST(Float8Cast, ScaleInDoubleAndZeros) {
  // 448 / 3 in float64, then float32: not float32's own division of the same numbers' floats
  // necessarily, and never a reciprocal's product.
  const auto s = float8_scale(at::full({}, 3.0f), at::kFloat8_e4m3fn);
  EXPECT_EQ(s.item<float>(), static_cast<float>(448.0 / 3.0));
  EXPECT_EQ(float8_scale(at::full({}, 3.0f), at::kFloat8_e4m3fn, true).item<float>(), 128.f);
  // An all-zero tensor: a finite scale (amax floored at 1e-12) and zero data.
  const auto q = to_float8(at::zeros({4, 4}), at::kFloat8_e4m3fn);
  EXPECT_EQ(q.scale.item<float>(), static_cast<float>(448.0 / 1e-12));
  EXPECT_TRUE(at::all(q.data.to(at::kFloat) == 0).item<bool>());
  EXPECT_THROW(float8_max(at::kFloat), fsdpp::Error);
  EXPECT_THROW(to_float8(q.data, at::kFloat8_e4m3fn), fsdpp::Error);
}

// Forward and both gradients are the products of the operands quantized as each recipe says,
// each computed here from the reference quantizer in double.
TEST(Float8Linear, GemmsAreTheQuantizedProducts) {
  const int64_t B = 2, T = 24, K = 32, N = 48;
  for (auto recipe : {Float8Recipe::TENSORWISE, Float8Recipe::ROWWISE}) {
    SCOPED_TRACE(std::string(to_string(recipe)));
    const bool rw = recipe == Float8Recipe::ROWWISE;
    auto x = (randn({B, T, K}, 2) * at::linspace(0.1, 4, T).view({1, T, 1})).requires_grad_();
    auto w = (randn({N, K}, 3) * 0.2).requires_grad_();
    const auto g = randn({B, T, N}, 4) * at::linspace(0.01, 2, N);
    const auto y = float8_linear(x, w, recipe);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{B, T, N}));
    y.backward(g);
    const auto x2 = x.detach().reshape({-1, K}), g2 = g.reshape({-1, N});
    const int64_t along_k = rw ? 1 : -1;
    const auto y_ref = ref_dequantize(x2, at::kFloat8_e4m3fn, along_k, rw)
                           .mm(ref_dequantize(w.detach(), at::kFloat8_e4m3fn, along_k, rw).t());
    const auto gdt = rw ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
    const auto dx_ref = ref_dequantize(g2, gdt, rw ? 1 : -1, rw)
                            .mm(ref_dequantize(w.detach(), at::kFloat8_e4m3fn, rw ? 0 : -1, rw));
    const auto dw_ref = ref_dequantize(g2, gdt, rw ? 0 : -1, rw)
                            .t()
                            .mm(ref_dequantize(x2, at::kFloat8_e4m3fn, rw ? 0 : -1, rw));
    // float32 accumulation of exact float8 products.
    EXPECT_LT(max_rel(y.reshape({-1, N}), y_ref), 1e-6);
    EXPECT_LT(max_rel(x.grad().reshape({-1, K}), dx_ref), 1e-6);
    EXPECT_LT(max_rel(w.grad(), dw_ref), 1e-6);
    // And near full precision's products: e4m3 keeps 3 mantissa bits, e5m2 2.
    EXPECT_LT(rel_err(y.reshape({-1, N}), x2.to(at::kDouble).mm(w.detach().to(at::kDouble).t())), 0.05);
    EXPECT_LT(rel_err(x.grad().reshape({-1, K}), g2.to(at::kDouble).mm(w.detach().to(at::kDouble))), 0.1);
    EXPECT_LT(rel_err(w.grad(), g2.to(at::kDouble).t().mm(x2.to(at::kDouble))), 0.1);
  }
}

TEST(Float8Linear, KeepsTheCallersDtypes) {
  auto x = randn({32, 16}, 5).to(at::kBFloat16).requires_grad_();
  auto w = randn({16, 16}, 6).requires_grad_();  // a float32 weight with bf16 activations
  const auto y = float8_linear(x, w, Float8Recipe::TENSORWISE);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  y.sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), at::kBFloat16);
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
  EXPECT_THROW(float8_linear(x, w, Float8Recipe::OFF), fsdpp::Error);
  EXPECT_THROW(float8_linear(x, w.narrow(1, 0, 8), Float8Recipe::TENSORWISE), fsdpp::Error);
}

// torchao 0.17's auto filters (torchao/float8/float8_linear_utils.py), (N, K) = weight.shape =
// (out, in).
TEST(Float8Filter, TorchaosAutoFilter) {
  const auto T = Float8Recipe::TENSORWISE, R = Float8Recipe::ROWWISE;
  const auto A = Float8Filter::AUTO;
  EXPECT_FALSE(float8_converts(1024, 4096, T, A));   // K <= 4096 and N <= 1024
  EXPECT_FALSE(float8_converts(512, 512, T, A));
  EXPECT_TRUE(float8_converts(2048, 4096, T, A));
  EXPECT_TRUE(float8_converts(1024, 8192, T, A));
  EXPECT_TRUE(float8_converts(4096, 1024, T, A));
  EXPECT_TRUE(float8_converts(14336, 4096, T, A));   // Llama 3 8B's w1
  EXPECT_FALSE(float8_converts(2048, 8192, R, A));   // N <= 2048
  EXPECT_FALSE(float8_converts(8192, 1024, R, A));   // K <= 1024
  EXPECT_FALSE(float8_converts(4096, 2048, R, A));   // N <= 4096 and K <= 2048
  EXPECT_TRUE(float8_converts(4096, 4096, R, A));
  EXPECT_TRUE(float8_converts(16, 32, T, Float8Filter::ALL));
  EXPECT_FALSE(float8_converts(16, 40, T, Float8Filter::ALL));  // dims multiples of 16 only
  EXPECT_FALSE(float8_converts(8192, 8192, Float8Recipe::OFF, Float8Filter::ALL));
}

TEST(Float8Convert, TakesTheDecodersProjectionsOnly) {
  models::Llama llama(test::tiny_llama(/*n_layers=*/2, /*max_seq_len=*/16, /*seed=*/3));
  const auto tokens = at::randint(64, {2, 16}, at::make_generator<at::CPUGeneratorImpl>(9), at::kLong);
  const auto full = llama->forward(tokens);
  EXPECT_TRUE(models::convert_to_float8(*llama, {Float8Recipe::TENSORWISE}).empty());  // auto: too small
  const auto names = models::convert_to_float8(*llama, {Float8Recipe::TENSORWISE, Float8Filter::ALL});
  ASSERT_EQ(names.size(), 14u);  // q, k, v, o and three MLP projections per layer
  for (const auto& n : names) {
    EXPECT_TRUE(n.rfind("layers.", 0) == 0) << n;
  }
  const auto f8 = llama->forward(tokens);
  EXPECT_FALSE(at::equal(f8, full));
  EXPECT_LT(rel_err(f8, full), 0.05);
  EXPECT_TRUE(models::convert_to_float8(*llama, {}).empty());  // off: back to LibTorch's linear
  EXPECT_TRUE(at::equal(llama->forward(tokens), full));

  // Qwen3-MoE: attention and the dense MLPs; never the router, the experts or the LM head.
  models::Qwen3Moe moe(test::tiny_moe(/*n_layers=*/2, /*num_experts=*/4, /*seed=*/1));
  const auto moe_names = models::convert_to_float8(*moe, {Float8Recipe::ROWWISE, Float8Filter::ALL});
  EXPECT_FALSE(moe_names.empty());
  for (const auto& n : moe_names) {
    EXPECT_EQ(n.find("experts"), std::string::npos) << n;
    EXPECT_EQ(n.find("lm_head"), std::string::npos) << n;
    EXPECT_TRUE(n.find("self_attn.") != std::string::npos || n.find("mlp.") != std::string::npos) << n;
  }
}

// Six AdamW steps on one batch: float8's losses follow full precision's within a few percent and
// fall as theirs do.
TEST(Float8Convert, TrainsLikeFullPrecision) {
  const auto tokens = at::randint(64, {4, 17}, at::make_generator<at::CPUGeneratorImpl>(5), at::kLong);
  const auto inputs = tokens.narrow(1, 0, 16), targets = tokens.narrow(1, 1, 16);
  auto losses = [&](Float8Recipe recipe) {
    models::Llama llama(test::tiny_llama(2, 16, /*seed=*/11));
    models::convert_to_float8(*llama, {recipe, Float8Filter::ALL});
    torch::optim::AdamW opt(llama->parameters(), torch::optim::AdamWOptions(3e-3));
    std::vector<double> out;
    for (int step = 0; step < 6; ++step) {
      opt.zero_grad();
      const auto logits = llama->forward(inputs);
      auto loss = at::cross_entropy_loss(logits.reshape({-1, 64}), targets.reshape({-1}));
      loss.backward();
      torch::nn::utils::clip_grad_norm_(llama->parameters(), 1.0);
      opt.step();
      out.push_back(loss.item<double>());
    }
    return out;
  };
  const auto full = losses(Float8Recipe::OFF);
  for (auto recipe : {Float8Recipe::TENSORWISE, Float8Recipe::ROWWISE}) {
    const auto f8 = losses(recipe);
    for (size_t i = 0; i < full.size(); ++i) {
      EXPECT_NEAR(f8[i], full[i], 0.03 * full[i]) << to_string(recipe) << " step " << i + 1;
    }
    EXPECT_LT(f8.back(), f8.front() - 0.1) << to_string(recipe);
  }
}
