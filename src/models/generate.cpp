// sample_tokens: the sampling loop every model's generate shares. See
// include/fsdpp/models/generate.h.
#include "fsdpp/models/generate.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <limits>

#include "fsdpp/common/error.h"

namespace fsdpp::models {

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
  FSDPP_CHECK_AS(ConfigError, temperature >= 0,
                 "[models] generate: temperature={} is negative; expected 0 (greedy) or > 0",
                 temperature);
  FSDPP_CHECK_AS(ConfigError, options.top_p > 0 && options.top_p <= 1,
                 "[models] generate: top_p={} is outside (0, 1]", options.top_p);
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
      next = at::multinomial(probs, 1, /*replacement=*/false, options.generator);
    }
    tokens = at::cat({tokens, next.to(tokens.device())}, 1);
    if (options.stop && options.stop(tokens)) break;
  }
  return prompt.dim() == 1 ? tokens.squeeze(0) : tokens;
}

}  // namespace fsdpp::models
