#include "decoder_parts.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <ATen/core/Tensor.h>

#include <cmath>
#include <mutex>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/kept_linear.h"

namespace fsdpp::models::detail {

at::Tensor project(torch::nn::Linear& linear, const at::Tensor& x, Float8Recipe float8) {
  if (float8 == Float8Recipe::OFF) return fsdpp::kept_linear(linear, x);
  return float8_linear(x, linear->weight, float8);
}

void check_positive(std::string_view config, std::string_view field, int64_t value) {
  FSDPP_CHECK_AS(ConfigError, value > 0, "[models] {}.{}={} is not positive; expected > 0", config,
                 field, value);
}

void check_positive_number(std::string_view config, std::string_view field, double value) {
  FSDPP_CHECK_AS(ConfigError, value > 0 && std::isfinite(value),
                 "[models] {}.{}={} is not a positive number; expected > 0", config, field, value);
}

int64_t check_positions(const at::Tensor& positions, at::IntArrayRef tokens, int64_t limit,
                        std::string_view model, std::string_view limit_name) {
  FSDPP_CHECK_AS(ConfigError,
                 positions.dim() == 2 && positions.scalar_type() == at::kLong &&
                     positions.sizes() == tokens,
                 "[models] {} positions must be (B,T) int64 like the tokens {}; got {} of {}",
                 model, tokens, positions.sizes(), c10::toString(positions.scalar_type()));
  const auto range = at::aminmax(positions);  // one sync for both ends
  const auto ends = at::stack({std::get<0>(range), std::get<1>(range)}).cpu();
  const int64_t lo = ends[0].item<int64_t>(), hi = ends[1].item<int64_t>();
  FSDPP_CHECK_AS(ConfigError, lo >= 0 && hi < limit,
                 "[models] {} positions run from {} to {}; expected 0 <= position < {}={} (each "
                 "document's positions restart at 0)",
                 model, lo, hi, limit_name, limit);
  return hi;
}

at::Tensor document_causal_mask(const at::Tensor& positions) {
  const int64_t T = positions.size(1);
  // Document ids: how many documents have started up to each token.
  const auto doc = (positions == 0).cumsum(1);                                      // (B,T)
  const auto same = doc.unsqueeze(2) == doc.unsqueeze(1);                           // (B,T,T)
  const auto causal = at::ones({T, T}, positions.options().dtype(at::kBool)).tril();  // (T,T)
  return (same & causal).unsqueeze(1);                                              // (B,1,T,T)
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask) {
  if (!mask.defined()) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                            /*is_causal=*/true);
  }
  // Every query keeps itself, so no row of the mask is empty (an empty one would give NaN).
  // A mask rules out the flash kernel on CUDA: SDPA takes the memory-efficient one or the math.
  return at::scaled_dot_product_attention(q, k, v, mask.to(q.device()), /*dropout_p=*/0.0,
                                          /*is_causal=*/false);
}

at::Tensor rows_at(const at::Tensor& table, const at::Tensor& positions) {
  auto sizes = positions.sizes().vec();
  for (int64_t d = 1; d < table.dim(); ++d) sizes.push_back(table.size(d));
  return table.index_select(0, positions.reshape({-1}).to(table.device())).view(sizes);
}

at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const auto B = x.size(0), T = x.size(1), Hkv = x.size(2), D = x.size(3);
  return x.unsqueeze(3).expand({B, T, Hkv, n_rep, D}).reshape({B, T, Hkv * n_rep, D});
}

at::Tensor rotate_pairs(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s) {
  auto x0 = xc.select(-1, 0), x1 = xc.select(-1, 1);
  return at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).flatten(-2);
}

at::Tensor rotate_pairs_complex(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s) {
  const auto z = at::view_as_complex(xc.contiguous());  // (B,T,H,D/2): x0 + i x1
  return at::view_as_real(z * at::complex(c, s)).flatten(-2);
}

void draw_weights(torch::nn::Module& model, const InitPlan& plan) {
  if (fsdpp::detail::unit_of(model)) {
    init_exact(model, plan);
  } else {
    init_whole(model, plan);
  }
}

GlobalRngRestorer::GlobalRngRestorer() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  state_ = gen.get_state();
}

GlobalRngRestorer::~GlobalRngRestorer() {
  try {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state_);
  } catch (...) {  // destructors never throw; losing the restore only costs reproducibility
  }
}

}  // namespace fsdpp::models::detail
