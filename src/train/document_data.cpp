// fsdpp-train's records: prepared once into documents, split, sampled as rows. See
// document_data.h.
#include "document_data.h"

#include <xxhash.h>

#include <cmath>
#include <memory>
#include <optional>

#include "fsdpp/common/error.h"
#include "fsdpp/data/data_files.h"
#include "fsdpp/data/document_maker.h"
#include "fsdpp/data/document_sampler.h"
#include "fsdpp/data/example.h"
#include "fsdpp/data/mixture_reader.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/dist/string_collectives.h"
#include "phases.h"
#include "token_batches.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

bool is_prepared_dir(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(fs::path(path) / data::kPreparedManifest, ec);
}

// The records of data.path or data.mixture, one example at a time.
class Examples {
 public:
  explicit Examples(const TrainConfig& cfg) {
    const data::ExampleOptions eo{.text_field = cfg.data.dataset_text_field};
    if (cfg.data.mixture.empty()) {
      one_.emplace(data::resolve_data_path(cfg.data.path), eo);
      for (const auto& f : one_->files().files) files_.push_back(f.path);
    } else {
      std::vector<data::MixtureSource> sources;
      for (const auto& m : cfg.data.mixture) {
        sources.push_back({m.path, m.weight});
        for (const auto& f : data::resolve_data_path(m.path).files) files_.push_back(f.path);
      }
      mix_.emplace(std::move(sources),
                   data::MixtureOptions{.seed = cfg.training.seed,
                                        .stopping = data::StoppingStrategy::FIRST_EXHAUSTED,
                                        .examples = eo});
    }
  }
  bool next(data::Example& e) {
    size_t source = 0;
    return one_ ? one_->next(e) : mix_->next(e, source);
  }
  const std::vector<fs::path>& files() const { return files_; }

 private:
  std::optional<data::ExampleReader> one_;
  std::optional<data::MixtureReader> mix_;
  std::vector<fs::path> files_;
};

// What the documents are made of besides the sources' bytes and the tokenizer: the record
// options and, for a mixture, its paths, weights and seed.
std::string record_options(const TrainConfig& cfg, const data::DocumentMaker& maker) {
  std::string o = maker.describe() + " text_field=" + cfg.data.dataset_text_field;
  for (const auto& m : cfg.data.mixture) o += fmt::format(" mixture={}:{}", m.path, m.weight);
  if (!cfg.data.mixture.empty()) o += fmt::format(" seed={} stopping=first_exhausted", cfg.training.seed);
  return o;
}

std::string spec_digest(const data::PrepareSpec& spec) {
  std::string key = spec.tokenizer + "\n" + spec.options + "\n" + std::to_string(spec.vocab_size);
  for (const auto& s : spec.sources) key += fmt::format("\n{} {} {:016x}", s.path, s.bytes, s.xxh3);
  return fmt::format("{:016x}", XXH3_64bits(key.data(), key.size()));
}

// The run's prepared documents: data.path itself when prepared already, else the cache (made by
// rank 0). Returns the directory and its manifest.
std::pair<fs::path, data::PreparedManifest> prepared_documents(TrainSession& s) {
  const auto& cfg = s.cfg;
  if (cfg.data.mixture.empty() && is_prepared_dir(cfg.data.path)) {
    auto m = data::read_manifest(cfg.data.path);
    FSDPP_CHECK_AS(ConfigError, m->spec.tokenizer == s.tokenizer->name(),
                   "[train] data.path='{}' was prepared with tokenizer '{}', and this run's is "
                   "'{}': its ids would mean other strings to this model. Prepare it again with "
                   "this run's tokenizer (fsdpp-data prepare --tokenizer ...)",
                   cfg.data.path, m->spec.tokenizer, s.tokenizer->name());
    return {cfg.data.path, *m};
  }
  data::DocumentMaker maker(*s.tokenizer, {.completion_only_loss = cfg.data.completion_only_loss,
                                           .assistant_only_loss = cfg.data.assistant_only_loss});
  std::optional<data::PreparedManifest> manifest;
  fs::path dir;
  dist::agree_on_failure(*s.world.group(), "preparing data.path's records", [&] {
    if (!s.lead) return;
    Examples examples(cfg);
    data::PrepareSpec spec{.sources = data::identify_sources(examples.files()),
                           .tokenizer = s.tokenizer->name(),
                           .vocab_size = s.tokenizer->vocab_size(),
                           .options = record_options(cfg, maker)};
    dir = s.cache_dir / ("documents-" + spec_digest(spec));
    const std::function<bool(data::Example&)> next = [&](data::Example& e) { return examples.next(e); };
    const std::function<data::PreparedDocument(const data::Example&)> make =
        [&](const data::Example& e) { return maker.make(e); };
    data::PrepareOptions po;
    po.threads = 0;
    po.progress = [&](int64_t records, int64_t docs, int64_t tokens) {
      s.say(fmt::format("[data] preparing: {} records, {} documents, {} tokens", records, docs, tokens));
    };
    manifest = data::prepare_documents<data::Example>(dir, spec, next, make, po);
  });
  // Every rank reads the directory rank 0 named (the cache directory is shared by the node).
  std::string shared = dir.string();
  dist::broadcast_string(*s.world.group(), shared, 0, {"prepared_documents"});
  dir = shared;
  if (!manifest) manifest = data::read_manifest(dir);
  FSDPP_CHECK(manifest.has_value(), "[train] the prepared records '{}' have no {}", dir.string(),
              data::kPreparedManifest);
  return {dir, *manifest};
}

}  // namespace

bool is_record_data(const DataSection& data) {
  if (!data.mixture.empty()) return true;
  if (is_prepared_dir(data.path)) return true;
  return !data::resolve_data_path(data.path).is_text();
}

void prepare_record_batches(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& d = cfg.data;
  const auto [dir, manifest] = prepared_documents(s);
  auto store = std::make_shared<const data::DocumentStore>(data::open_prepared(dir, manifest));
  const int64_t n = store->num_documents();
  const auto n_val = static_cast<int64_t>(std::llround(static_cast<double>(n) * d.val_fraction));
  int64_t n_train = n - n_val;
  if (d.train_fraction < 1) {
    n_train = static_cast<int64_t>(std::llround(static_cast<double>(n_train) * d.train_fraction));
  }
  const data::RowPlanOptions plan{.seq_len = d.seq_len,
                                  .packing = d.packing,
                                  .strategy = d.packing_strategy,
                                  .long_documents = d.long_documents,
                                  .padding_free = d.document_masking()};
  const int64_t pad = s.tokenizer->special_token_ids().pad.value_or(
      s.tokenizer->special_token_ids().eos.value_or(0));
  auto sampler = std::make_unique<data::DocumentSampler>(
      store, std::pair<int64_t, int64_t>{0, n_train}, plan,
      data::DocumentSamplerOptions{.share = s.share(/*shuffle=*/true), .pad_id = pad});
  const auto& p = sampler->plan();
  const auto skipped = manifest.skipped();
  std::string skips;
  for (const auto& [why, count] : skipped) skips += fmt::format(", {} skipped ({})", count, why);
  s.say(fmt::format("[train] data: {} ({} records, {} documents, {} tokens, {} counted by the "
                    "loss{}; tokenizer {}); train {} documents in {} rows of {} ({}{}{}), "
                    "validation {} documents",
                    d.mixture.empty() ? d.path : "data.mixture", manifest.records, n,
                    manifest.tokens(), manifest.loss_tokens(), skips, s.tokenizer->name(), n_train,
                    p.num_rows(), d.seq_len,
                    d.packing ? fmt::format("packed, {}", d.packing_strategy.name()) : "one document a row",
                    plan.padding_free ? ", each document attended to alone" : "",
                    p.split_documents() + p.truncated_documents() > 0
                        ? fmt::format(", {} long documents split, {} truncated ({} tokens dropped)",
                                      p.split_documents(), p.truncated_documents(), p.dropped_tokens())
                        : "",
                    n_val));
  if (n_val > 0) {
    auto val = [store, plan, pad, n_train, n](const SourceOptions& o) {
      return std::make_unique<data::DocumentSampler>(
          store, std::pair<int64_t, int64_t>{n_train, n}, plan,
          data::DocumentSamplerOptions{.share = o, .pad_id = pad});
    };
    // Evaluated at the end of every run: a split without a row for every rank would fail there,
    // after the training steps, so it is refused here.
    try {
      val(s.share(/*shuffle=*/false));
    } catch (const ConfigError& e) {
      FSDPP_THROW(ConfigError,
                  "[train] the validation split (data.val_fraction={}, the last {} documents) is "
                  "too small: {}. Raise data.val_fraction, or set it to 0 to train without "
                  "validation",
                  d.val_fraction, n_val, e.what());
    }
    s.eval_batches = [val](const SourceOptions& o) {
      return std::unique_ptr<train::BatchSource>(std::make_unique<SamplerBatches>(val(o)));
    };
  }
  s.doc_sampler = std::move(sampler);
  s.batches = std::make_unique<TokenBatches>(*s.doc_sampler, loader_options(s));
  s.tokens_per_example = d.seq_len;
}

}  // namespace fsdpp::train::detail
