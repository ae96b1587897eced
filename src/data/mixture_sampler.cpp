#include "fsdpp/data/mixture_sampler.h"

#include <algorithm>
#include <cmath>

#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

// SplitMix64's finalizer (Steele, Lea and Flood 2014): a bijection of 64-bit words whose outputs
// for consecutive inputs pass BigCrush, which is all a counter-based draw needs.
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

MixtureSampler::MixtureSampler(const std::vector<double>& weights, uint64_t seed) : seed_(seed) {
  FSDPP_CHECK_AS(ConfigError, !weights.empty(), "[data] a mixture needs at least one source");
  double total = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    FSDPP_CHECK_AS(ConfigError, std::isfinite(weights[k]) && weights[k] > 0,
                   "[data] data.mixture[{}].weight is {}; a weight is a finite number > 0 (weights "
                   "are relative: they are divided by their sum)", k, weights[k]);
    total += weights[k];
  }
  double sum = 0;
  for (double w : weights) {
    probabilities_.push_back(w / total);
    sum += w / total;
    cumulative_.push_back(sum);
  }
  cumulative_.back() = 1.0;  // rounding must not leave a gap above the last source
}

size_t MixtureSampler::source_at(int64_t draw) const {
  // SplitMix64's draw-th output from a state that the seed, mixed once, starts (nearby seeds give
  // unrelated sequences); its top 53 bits are a uniform double in [0, 1).
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;
  const uint64_t bits = mix64(mix64(seed_) + (static_cast<uint64_t>(draw) + 1) * kGamma);
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
  return std::min<size_t>(it - cumulative_.begin(), cumulative_.size() - 1);
}

}  // namespace fsdpp::data
