#pragma once
// The examples of a weighted mixture of data sources, interleaved as
// datasets.interleave_datasets(sources, probabilities, seed, stopping_strategy) interleaves
// iterable datasets: each draw's source comes from MixtureSampler (mixture_sampler.h), and that
// source's next example is taken, each source in its own order (its files, then its records).
//
//   fsdpp::data::MixtureReader mix({{"chat.jsonl", 3}, {"web/*.parquet", 1}},
//                                  {.seed = 42, .stopping = fsdpp::data::StoppingStrategy::ALL_EXHAUSTED});
//   fsdpp::data::Example ex;
//   size_t source;
//   while (mix.next(ex, source)) ...
//
// A source is exhausted when its last example has been taken. Then, as in datasets:
//   FIRST_EXHAUSTED (datasets' default): the mixture ends (undersampling the other sources);
//   ALL_EXHAUSTED: the exhausted source starts again from its first example, and the mixture ends
//     once every source has been exhausted at least once (oversampling);
//   ALL_EXHAUSTED_WITHOUT_REPLACEMENT: draws of an exhausted source are skipped, and the mixture
//     ends when all are exhausted: every example exactly once, in a weighted random interleaving.
// Sources are read lazily and streaming: no source is counted or loaded first.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fsdpp/data/example.h"
#include "fsdpp/data/mixture_sampler.h"

namespace fsdpp::data {

enum class StoppingStrategy { FIRST_EXHAUSTED, ALL_EXHAUSTED, ALL_EXHAUSTED_WITHOUT_REPLACEMENT };

// datasets' names: "first_exhausted", "all_exhausted", "all_exhausted_without_replacement".
std::string_view stopping_strategy_name(StoppingStrategy strategy);
// Throws ConfigError naming `name` and listing the three.
StoppingStrategy stopping_strategy_from_name(std::string_view name);

// One entry of data.mixture.
struct MixtureSource {
  std::string path;     // as data.path: a file, a directory or a glob (data_files.h)
  double weight = 1.0;  // relative, > 0
};

struct MixtureOptions {
  uint64_t seed = 0;
  StoppingStrategy stopping = StoppingStrategy::FIRST_EXHAUSTED;
  ExampleOptions examples;  // the same text field for every source
};

class MixtureReader {
 public:
  // Resolves every source's path (data_files.h); throws ConfigError naming data.mixture[k] for a
  // path that is plain text or does not resolve, and for a bad weight (mixture_sampler.h).
  MixtureReader(std::vector<MixtureSource> sources, MixtureOptions options = {});
  ~MixtureReader();

  // The next example and the index of its source; false when the stopping strategy ends the mixture.
  bool next(Example& example, size_t& source);

  size_t sources() const { return sources_.size(); }
  const MixtureSampler& sampler() const { return sampler_; }
  int64_t draws() const { return draws_; }               // the sampler's draws so far
  int64_t examples(size_t source) const;                 // taken from the source so far
  int64_t passes(size_t source) const;                   // times the source was exhausted
  int64_t skipped(size_t source) const;                  // records skipped as empty, all passes

 private:
  struct Source;
  bool stop() const;

  std::vector<std::unique_ptr<Source>> sources_;
  MixtureSampler sampler_;
  MixtureOptions options_;
  int64_t draws_ = 0;
};

}  // namespace fsdpp::data
