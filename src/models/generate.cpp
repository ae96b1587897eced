// sample_tokens: the sampling loop every model's generate shares. See
// include/fsdpp/models/generate.h.
#include "fsdpp/models/generate.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "fsdpp/common/error.h"

namespace fsdpp::models {
namespace {

// One token per row of probs (B,V): with the batch's generator, or each row with its own.
at::Tensor draw(const at::Tensor& probs, const GenerateOptions& options) {
  if (options.row_generators.empty()) {
    return at::multinomial(probs, 1, /*replacement=*/false, options.generator);
  }
  FSDPP_CHECK_AS(ConfigError, static_cast<int64_t>(options.row_generators.size()) == probs.size(0),
                 "[models] generate: {} row generators for {} rows; expected one per row",
                 options.row_generators.size(), probs.size(0));
  // On the CPU, with CPU generators: the tokens are the same whatever device the model is on.
  const auto cpu = probs.cpu();
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < probs.size(0); ++b) {
    rows.push_back(at::multinomial(cpu[b], 1, /*replacement=*/false, options.row_generators[b]));
  }
  return at::stack(rows).to(probs.device());
}

}  // namespace

at::Tensor sample_tokens(const std::function<at::Tensor(const at::Tensor&)>& last_logits,
                         const SampledModel& model, const at::Tensor& prompt,
                         const GenerateOptions& options) {
  const int64_t n_new = options.max_new_tokens;
  const double temperature = options.temperature;
  const int64_t top_k = options.top_k;
  FSDPP_CHECK_AS(ConfigError, (prompt.dim() == 1 || prompt.dim() == 2) && prompt.size(-1) > 0,
                 "[models] generate: prompt must be (T) or (B,T) with T >= 1; got shape {}",
                 prompt.sizes());
  FSDPP_CHECK_AS(ConfigError, n_new >= 0, "[models] generate: n_new={} is negative", n_new);
  FSDPP_CHECK_AS(ConfigError, std::isfinite(temperature) && temperature >= 0,
                 "[models] generate: temperature={}; expected a finite number >= 0 (0: greedy)",
                 temperature);
  FSDPP_CHECK_AS(ConfigError, options.top_p > 0 && options.top_p <= 1,
                 "[models] generate: top_p={}; expected a probability in (0, 1] (1: every "
                 "token)",
                 options.top_p);
  torch::NoGradGuard no_grad;
  const int64_t max_len = model.max_seq_len;
  const int64_t vocab = model.vocab_size;
  auto tokens = (prompt.dim() == 1 ? prompt.unsqueeze(0) : prompt).to(at::kLong);  // (B,T0)
  for (int64_t step = 0; step < n_new; ++step) {
    const int64_t len = tokens.size(1);
    auto context = len > max_len ? tokens.narrow(1, len - max_len, max_len) : tokens;
    // Sampled on the CPU whatever device the model computes on: the generator is a CPU one
    // (options.generator), and a GPU run samples what a CPU run would.
    auto last = last_logits(context).to(at::kCPU, at::kFloat);  // (B,V)
    if (options.allowed_vocab > 0 && options.allowed_vocab < last.size(-1)) {
      last.narrow(-1, options.allowed_vocab, last.size(-1) - options.allowed_vocab)
          .fill_(-std::numeric_limits<float>::infinity());
    }
    at::Tensor next;                                   // (B,1)
    if (temperature == 0) {
      next = last.argmax(-1, /*keepdim=*/true);
    } else {
      last = last / temperature;
      if (top_k > 0 && top_k < vocab) {
        auto kth = std::get<0>(last.topk(top_k, -1)).narrow(-1, top_k - 1, 1);  // (B,1)
        last = last.masked_fill(last < kth, -std::numeric_limits<float>::infinity());
      }
      auto probs = last.softmax(-1);  // (B,V)
      if (options.top_p < 1) {
        // Keep the most likely tokens up to and including the one that reaches top_p.
        auto [sorted, order] = probs.sort(-1, /*descending=*/true);
        auto before = sorted.cumsum(-1) - sorted;  // mass of the tokens ranked above each
        sorted = sorted.masked_fill(before >= options.top_p, 0);
        probs = at::zeros_like(probs).scatter_(-1, order, sorted);
      }
      next = draw(probs, options);
    }
    tokens = at::cat({tokens, next.to(tokens.device())}, 1);
    if (options.stop && options.stop(tokens)) break;
  }
  return prompt.dim() == 1 ? tokens.squeeze(0) : tokens;
}

}  // namespace fsdpp::models

namespace fsdpp::models {

std::function<at::Tensor(const at::Tensor&)> cached_last_logits(
    std::function<at::Tensor(const at::Tensor&, KVCache&)> forward, size_t n_layers) {
  auto cache = std::make_shared<KVCache>(n_layers);
  return [forward = std::move(forward), cache](const at::Tensor& context) {
    const int64_t len = context.size(1);
    at::Tensor fresh;
    if (cache->length > 0 && len == cache->length + 1) {
      fresh = context.narrow(1, len - 1, 1);
    } else {
      cache->reset();
      fresh = context;
    }
    return forward(fresh, *cache).select(1, -1);
  };
}

}  // namespace fsdpp::models
