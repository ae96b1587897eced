#include "fsdpp/data/mixture_reader.h"

#include <algorithm>

#include "fsdpp/common/error.h"

namespace fsdpp::data {

// One source: its files, a reader over them for the current pass, and the example that comes
// next, read ahead as datasets reads one ahead, so that a source is known to be exhausted as soon
// as its last example is taken.
struct MixtureReader::Source {
  DataFiles files;
  std::unique_ptr<ExampleReader> reader;
  std::optional<Example> ahead;
  int64_t examples = 0, passes = 0, skipped_before = 0;

  int64_t skipped() const { return skipped_before + (reader ? reader->skipped() : 0); }
  void start_pass(const ExampleOptions& options) {
    if (reader) skipped_before += reader->skipped();
    reader = std::make_unique<ExampleReader>(files, options);
    ahead.reset();
  }
  // Reads the example after the one just taken; false when there is none (exhausted).
  bool read_ahead() {
    Example ex;
    if (!reader->next(ex)) return false;
    ahead = std::move(ex);
    return true;
  }
};

std::string_view stopping_strategy_name(StoppingStrategy strategy) {
  switch (strategy) {
    case StoppingStrategy::FIRST_EXHAUSTED: return "first_exhausted";
    case StoppingStrategy::ALL_EXHAUSTED: return "all_exhausted";
    case StoppingStrategy::ALL_EXHAUSTED_WITHOUT_REPLACEMENT: return "all_exhausted_without_replacement";
  }
  return "?";
}

StoppingStrategy stopping_strategy_from_name(std::string_view name) {
  for (auto s : {StoppingStrategy::FIRST_EXHAUSTED, StoppingStrategy::ALL_EXHAUSTED,
                 StoppingStrategy::ALL_EXHAUSTED_WITHOUT_REPLACEMENT}) {
    if (stopping_strategy_name(s) == name) return s;
  }
  FSDPP_THROW(ConfigError, "[data] stopping strategy '{}' is not one of first_exhausted, all_exhausted, "
              "all_exhausted_without_replacement (datasets.interleave_datasets' names)", name);
}

namespace {

std::vector<double> weights_of(const std::vector<MixtureSource>& sources) {
  std::vector<double> w;
  for (const auto& s : sources) w.push_back(s.weight);
  return w;
}

}  // namespace

MixtureReader::MixtureReader(std::vector<MixtureSource> sources, MixtureOptions options)
    : sampler_(weights_of(sources), options.seed), options_(std::move(options)) {
  for (size_t k = 0; k < sources.size(); ++k) {
    DataFiles files;
    try {
      files = resolve_data_path(sources[k].path);
    } catch (const ConfigError& e) {
      FSDPP_THROW(ConfigError, "[data] data.mixture[{}]: {}", k, e.what());
    }
    FSDPP_CHECK_AS(ConfigError, !files.is_text(), "[data] data.mixture[{}].path '{}' is plain text; a "
                   "mixture's sources are data files (.jsonl, .json, .parquet, .arrow)", k, sources[k].path);
    auto source = std::make_unique<Source>();
    source->files = std::move(files);
    sources_.push_back(std::move(source));
  }
}

MixtureReader::~MixtureReader() = default;

bool MixtureReader::stop() const {
  const auto exhausted = [](const auto& s) { return s->passes > 0; };
  if (options_.stopping == StoppingStrategy::FIRST_EXHAUSTED) {
    return std::any_of(sources_.begin(), sources_.end(), exhausted);
  }
  return std::all_of(sources_.begin(), sources_.end(), exhausted);
}

bool MixtureReader::next(Example& example, size_t& source) {
  const bool without_replacement = options_.stopping == StoppingStrategy::ALL_EXHAUSTED_WITHOUT_REPLACEMENT;
  while (!stop()) {
    const size_t k = sampler_.source_at(draws_++);
    Source& s = *sources_[k];
    if (without_replacement && s.passes > 0) continue;
    if (!s.ahead) {
      // The first draw of a pass; an empty source throws here (ExampleReader names its path).
      if (!s.reader) s.start_pass(options_.examples);
      s.read_ahead();
    }
    example = std::move(*s.ahead);
    s.ahead.reset();
    ++s.examples;
    source = k;
    if (!s.read_ahead()) {
      ++s.passes;
      if (!without_replacement) s.start_pass(options_.examples);  // read again from the start
    }
    return true;
  }
  return false;
}

int64_t MixtureReader::examples(size_t source) const { return sources_.at(source)->examples; }
int64_t MixtureReader::passes(size_t source) const { return sources_.at(source)->passes; }
int64_t MixtureReader::skipped(size_t source) const { return sources_.at(source)->skipped(); }

}  // namespace fsdpp::data
