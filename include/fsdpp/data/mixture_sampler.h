#pragma once
// Which source each example of a weighted mixture comes from (data.mixture:
// [{path: ..., weight: ...}, ...]): datasets.interleave_datasets(probabilities, seed)'s rule.
//
//   fsdpp::data::MixtureSampler mix({0.7, 0.3}, /*seed=*/42);
//   size_t s = mix.source_at(i);   // the source of the mixture's i-th draw
//
// Each draw picks source k with probability p_k = weight_k / sum(weights), independently of the
// others, from a counter-based generator: draw i's source is a function of (seed, i) alone, so the
// sequence is the same on every machine and rank, any draw can be looked up without the ones before
// it, and resuming at draw i needs only i. The same seed gives the same sequence; it is not
// numpy's sequence (datasets draws with numpy), only the same distribution.
//
// Tolerance: the count of source k among n draws is binomial(n, p_k), so its share is within
// p_k +- 4 * sqrt(p_k * (1 - p_k) / n) for all but about 6 in 100 000 seeds; over 100 000 draws,
// +- 0.58 percentage points for p_k = 0.3. (Megatron's blended dataset instead keeps every prefix
// within one example of the weights with no randomness; datasets' rule was chosen because it is the
// one users of datasets and TRL configure, seed and stopping strategy included, mixture_reader.h.)

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fsdpp::data {

class MixtureSampler {
 public:
  // Throws ConfigError unless there is at least one weight and every weight is finite and > 0 (a
  // source of weight 0 would never be drawn, and never exhausted: drop it instead).
  MixtureSampler(const std::vector<double>& weights, uint64_t seed);

  // The source of draw `draw` (>= 0).
  size_t source_at(int64_t draw) const;

  size_t sources() const { return probabilities_.size(); }
  const std::vector<double>& probabilities() const { return probabilities_; }  // sum to 1

 private:
  std::vector<double> probabilities_;
  std::vector<double> cumulative_;  // cumulative_[k] = p_0 + ... + p_k; the last is 1
  uint64_t seed_;
};

}  // namespace fsdpp::data
