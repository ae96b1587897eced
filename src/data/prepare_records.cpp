// Records prepared into documents. See include/fsdpp/data/prepare_records.h.
#include "fsdpp/data/prepare_records.h"

#include <xxhash.h>

#include <memory>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::data {
namespace {

// The examples of the sources, one at a time.
class Examples {
 public:
  explicit Examples(const RecordSources& s) {
    if (s.mixture.empty()) {
      one_.emplace(resolve_data_path(s.path), s.examples);
    } else {
      mix_.emplace(s.mixture, MixtureOptions{.seed = s.seed, .stopping = s.stopping, .examples = s.examples});
    }
  }
  bool next(Example& e) {
    size_t source = 0;
    return one_ ? one_->next(e) : mix_->next(e, source);
  }

 private:
  std::optional<ExampleReader> one_;
  std::optional<MixtureReader> mix_;
};

std::vector<fs::path> files_of(const RecordSources& s) {
  std::vector<fs::path> out;
  auto add = [&](const std::string& path) {
    const auto files = resolve_data_path(path);
    FSDPP_CHECK_AS(ConfigError, !files.is_text(),
                   "[data] '{}' is plain text, not records: prepare reads JSON Lines, JSON, "
                   "Parquet, Arrow or a datasets directory (text trains through data.path as a "
                   "corpus, docs/own-text.md)",
                   path);
    for (const auto& f : files.files) out.push_back(f.path);
  };
  if (s.mixture.empty()) {
    add(s.path);
  } else {
    for (const auto& m : s.mixture) add(m.path);
  }
  return out;
}

}  // namespace

PrepareSpec record_spec(const RecordSources& sources, const Tokenizer& tokenizer,
                        const DocumentMaker& maker) {
  PrepareSpec spec;
  spec.sources = identify_sources(files_of(sources));
  spec.tokenizer = tokenizer.name();
  spec.vocab_size = tokenizer.vocab_size();
  spec.options = maker.describe() + " text_field=" + sources.examples.text_field;
  for (const auto& m : sources.mixture) spec.options += fmt::format(" mixture={}:{}", m.path, m.weight);
  if (!sources.mixture.empty()) {
    spec.options += fmt::format(" seed={} stopping={}", sources.seed, stopping_strategy_name(sources.stopping));
  }
  return spec;
}

std::string spec_digest(const PrepareSpec& spec) {
  std::string key = fmt::format("{}\n{}\n{}\n{}", spec.tokenizer, spec.vocab_size, spec.options,
                                spec.records_per_shard);
  for (const auto& s : spec.sources) key += fmt::format("\n{} {} {:016x}", s.path, s.bytes, s.xxh3);
  return fmt::format("{:016x}", XXH3_64bits(key.data(), key.size()));
}

PreparedManifest prepare_records(const RecordSources& sources, const DocumentMaker& maker,
                                 const PrepareSpec& spec, const fs::path& dir,
                                 const PrepareOptions& options) {
  Examples examples(sources);
  const std::function<bool(Example&)> next = [&](Example& e) { return examples.next(e); };
  const std::function<PreparedDocument(const Example&)> make = [&](const Example& e) {
    return maker.make(e);
  };
  return prepare_documents<Example>(dir, spec, next, make, options);
}

std::string mask_options(const std::string& spec_options) {
  std::istringstream in(spec_options);
  std::string out;
  for (std::string word; in >> word;) {
    if (word.rfind("completion_only_loss=", 0) == 0 || word.rfind("assistant_only_loss=", 0) == 0) {
      out += (out.empty() ? "" : " ") + word;
    }
  }
  return out;
}

}  // namespace fsdpp::data
