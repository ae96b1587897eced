// fsdpp-train's records: prepared once into documents, split, sampled as rows. See
// document_data.h.
#include "document_data.h"

#include <cmath>
#include <memory>
#include <optional>

#include "fsdpp/common/error.h"
#include "fsdpp/data/data_files.h"
#include "fsdpp/data/document_maker.h"
#include "fsdpp/data/document_sampler.h"
#include "fsdpp/data/prepare_records.h"
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

// data.path or data.mixture as the data layer's sources.
data::RecordSources sources_of(const TrainConfig& cfg) {
  data::RecordSources src;
  src.examples.text_field = cfg.data.dataset_text_field;
  if (cfg.data.mixture.empty()) {
    src.path = cfg.data.path;
  } else {
    for (const auto& m : cfg.data.mixture) src.mixture.push_back({m.path, m.weight});
    src.seed = cfg.training.seed;
  }
  return src;
}

// The loss options of the data: section, as the document maker takes them.
data::DocumentMakerOptions maker_options(const DataSection& d) {
  return {.completion_only_loss = d.completion_only_loss, .assistant_only_loss = d.assistant_only_loss};
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
    const data::DocumentMaker maker(*s.tokenizer, maker_options(cfg.data));
    const auto asked = data::mask_options(maker.describe()), made = data::mask_options(m->spec.options);
    FSDPP_CHECK_AS(ConfigError, asked == made,
                   "[train] data.path='{}' was prepared with {}, and this run asks for {}: its loss "
                   "masks are fixed when it is prepared. Prepare it again with this run's options, "
                   "or set them as it was prepared",
                   cfg.data.path, made, asked);
    return {cfg.data.path, *m};
  }
  const data::DocumentMaker maker(*s.tokenizer, maker_options(cfg.data));
  std::optional<data::PreparedManifest> manifest;
  fs::path dir;
  dist::agree_on_failure(*s.world.group(), "preparing data.path's records", [&] {
    if (!s.lead) return;
    const auto sources = sources_of(cfg);
    const auto spec = data::record_spec(sources, *s.tokenizer, maker);
    dir = s.cache_dir / ("documents-" + data::spec_digest(spec));
    data::PrepareOptions po;
    po.progress = [&](int64_t records, int64_t docs, int64_t tokens) {
      s.say(fmt::format("[data] preparing {}: {} records, {} documents, {} tokens", dir.string(),
                        records, docs, tokens));
    };
    manifest = data::prepare_records(sources, maker, spec, dir, po);
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
  // Both read windows of a token stream (a window's offset seeds its samples, names its cached
  // logits), which rows of documents are not.
  const auto& kd = cfg.distillation;
  FSDPP_CHECK_AS(ConfigError, kd.lmbda == 0 && !kd.seq_kd && kd.teacher_cache.empty(),
                 "[train] data.{} holds records, and {} reads windows of a text's tokens: "
                 "on-policy distillation (distillation.lmbda > 0, seq_kd) and an offline "
                 "teacher_cache are not supported with records yet. Distill from a live teacher "
                 "(distillation.teacher, lmbda=0), or train on text",
                 d.mixture.empty() ? "path" : "mixture",
                 kd.teacher_cache.empty() ? "on-policy distillation" : "distillation.teacher_cache");
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
                    d.packing ? fmt::format("packed {}", d.packing_strategy.name()) : "one document a row",
                    !d.packing ? ""
                    : plan.padding_free ? ": each document attended to alone"
                                        : ": a document attends to the earlier ones in its row",
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
