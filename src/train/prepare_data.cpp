// fsdpp-train's language models' data (run_model.h) at prepare_data (phases.h): the corpus, its
// tokenizer, the token cache, the training and validation splits and the sampler over the
// training split.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/data/tokenizer_identity.h"
#include "fsdpp/dist/agree.h"
#include "document_data.h"
#include "phases.h"
#include "token_batches.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

// data.path is a text file, or a directory whose files (resolve_data_files: regular, not *.dat /
// *.u8 indexes, not symlinks) are joined in name order into one cached corpus file.
fs::path corpus_file(const DataSection& data, const fs::path& cache_dir, dist::World& world) {
  const fs::path path = data.path;
  FSDPP_CHECK_AS(ConfigError, !data.path.empty(), "[train] data.path is empty; give a text file or a directory of text files");
  FSDPP_CHECK_AS(ConfigError, fs::exists(path), "[train] data.path '{}' does not exist", data.path);
  if (!fs::is_directory(path)) return path;
  std::vector<fs::path> files;
  for (const auto& f : resolve_data_files(data.path)) files.emplace_back(f);
  FSDPP_CHECK_AS(ConfigError, !files.empty(), "[train] data.path '{}' is a directory with no text files", data.path);
  size_t key = std::hash<std::string>{}(fs::absolute(path).string());
  for (const auto& f : files) {
    const auto mtime = fs::last_write_time(f).time_since_epoch().count();
    key ^= std::hash<std::string>{}(fmt::format("{}:{}:{}", f.filename().string(), fs::file_size(f), mtime)) +
           0x9e3779b97f4a7c15ULL + (key << 6) + (key >> 2);
  }
  const fs::path out = cache_dir / fmt::format("corpus-{:016x}.txt", key);
  dist::agree_on_failure(*world.group(), "joining data.path's files into one corpus", [&] {
    if (world.rank() != 0 || fs::exists(out)) return;
    std::string text;
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (!text.empty() && text.back() != '\n') text.push_back('\n');
    }
    write_file_atomically(out, text, "train");
  });
  return out;
}

std::unique_ptr<data::Tokenizer> make_tokenizer(const DataSection& data, const fs::path& corpus,
                                                const fs::path& cache_dir, dist::World& world) {
  if (data.tokenizer_is("byte")) return std::make_unique<data::ByteTokenizer>();
  // A file: a Hugging Face tokenizer.json (or a directory holding one), a SentencePiece .model.
  if (!data.tokenizer_is("sentencepiece")) return data::make_tokenizer(data.tokenizer);
  std::string model = data.tokenizer_model;
  if (model.empty()) {
    // Keyed by the corpus's content: a shared cache_dir never hands this run another text's model.
    model = data::SentencePieceTokenizer::cached_model_path(cache_dir, corpus, data.tokenizer_vocab_size)
                .string();
    const fs::path prefix = fs::path(model).replace_extension();
    dist::agree_on_failure(*world.group(), "training the tokenizer", [&] {
      if (world.rank() != 0 || fs::exists(model)) return;
      std::printf("[train] training a sentencepiece BPE tokenizer (vocab %lld) on %s\n",
                  static_cast<long long>(data.tokenizer_vocab_size), corpus.c_str());
      data::SentencePieceTokenizer::train(corpus.string(), prefix.string(), data.tokenizer_vocab_size);
    });
  }
  FSDPP_CHECK_AS(ConfigError, fs::exists(model), "[train] data.tokenizer_model '{}' does not exist", model);
  return std::make_unique<data::SentencePieceTokenizer>(model);
}

// Where this run's tokenizer came from, for messages that compare it with another.
std::string tokenizer_origin(const TrainSession& s) {
  const auto& d = s.cfg.data;
  if (s.init) return fmt::format("from model.init_from='{}'", s.init->dir().string());
  if (d.tokenizer_is("byte")) return "data.tokenizer=byte";
  if (!d.tokenizer_is("sentencepiece")) return fmt::format("data.tokenizer='{}'", d.tokenizer);
  if (!d.tokenizer_model.empty()) return fmt::format("data.tokenizer_model='{}'", d.tokenizer_model);
  return fmt::format("data.tokenizer=sentencepiece with data.tokenizer_vocab_size={}, trained on "
                     "data.path",
                     d.tokenizer_vocab_size);
}

// The tokenizer against the models it must speak with: the checkpoint resumed (its weights learnt
// its ids; the files it carries say which) and the distillation teacher.
void check_tokenizer_agrees(TrainSession& s, const data::Tokenizer& tok) {
  if (!s.resume_dir.empty()) {
    const auto saved = data::read_tokenizer_identity(s.resume_dir);
    FSDPP_CHECK_AS(ConfigError, !saved || data::same_tokenizer(*saved, tok),
                   "[train] this run's tokenizer, {} ({}), is not the one {} was trained with: "
                   "{}. Its weights learnt that tokenizer's ids, which mean other strings to "
                   "this one. Resume with the checkpoint's tokenizer{}, or start a new run from "
                   "its weights with model.init_from={} (which takes its tokenizer)",
                   data::identity_of(tok).describe(), tokenizer_origin(s), s.resume_dir.string(),
                   saved ? saved->describe() : "", saved && saved->kind == "sentencepiece"
                       ? fmt::format(" (data.tokenizer=sentencepiece data.tokenizer_model={})",
                                     (s.resume_dir / data::kSentencePieceModelFile).string())
                       : saved && saved->kind == "byte" ? " (data.tokenizer=byte)" : "",
                   s.resume_dir.string());
  }
  // A teacher model's tokenizer (an offline teacher_cache alone has no model directory to read).
  if (!s.cfg.distillation.teacher.empty()) {
    const auto warning = distill::check_teacher_tokenizer(s.cfg.distillation, tok, tokenizer_origin(s));
    if (warning) s.say(*warning);
  }
}

// The run's tokenizer. A model starts from its own: the one stored with model.init_from's
// weights (data.tokenizer, when it names a file, must be that one). A pretrained source without
// one takes data.tokenizer's file when its vocabulary fits the model's, never the byte tokenizer
// or one trained here for a model whose vocabulary is not theirs: its embedding rows mean the
// strings of the tokenizer it was trained with, and any other tokenizer's ids train it on noise.
std::unique_ptr<data::Tokenizer> run_tokenizer(TrainSession& s,
                                               const std::function<std::unique_ptr<data::Tokenizer>()>& configured) {
  const auto& d = s.cfg.data;
  const bool named_file = !d.tokenizer_is("byte") && !d.tokenizer_is("sentencepiece");
  if (!s.init) return configured();
  auto own = s.init->take_tokenizer();
  const std::string source = fmt::format("model.init_from='{}'", s.init->dir().string());
  if (own) {
    if (named_file) {
      const auto named = data::make_tokenizer(d.tokenizer);
      FSDPP_CHECK_AS(ConfigError, named->name() == own->name(),
                     "[train] data.tokenizer='{}' ({}) is not the tokenizer {} holds ({}); the "
                     "model's weights learnt that one's ids. Leave data.tokenizer out (the "
                     "model's own is used) or name the model's tokenizer",
                     d.tokenizer, named->name(), source, own->name());
    }
    s.say(fmt::format("[train] tokenizer {} from {}{}", own->name(), source,
                      named_file ? "" : " (data.tokenizer is not used)"));
    return own;
  }
  const int64_t model_vocab = s.init->vocab_size();
  if (!named_file) {
    FSDPP_CHECK_AS(ConfigError, d.tokenizer_is("byte") && model_vocab == 256,
                   "[train] {} holds no tokenizer (no tokenizer.json, tokenizer.model or "
                   "fsdpp_tokenizer.json), and data.tokenizer={} cannot stand in for it: the "
                   "model's {} embedding rows mean the strings of the tokenizer it was trained "
                   "with. Name that tokenizer: data.tokenizer=<its tokenizer.json, the Hugging "
                   "Face model directory holding it, or its .model file>",
                   source, d.tokenizer, model_vocab);
    return configured();
  }
  auto named = configured();
  FSDPP_CHECK_AS(ConfigError, named->vocab_size() <= model_vocab,
                 "[train] data.tokenizer='{}' has {} tokens, more than the {} rows of the "
                 "embedding of {}; expected the model's own tokenizer",
                 d.tokenizer, named->vocab_size(), model_vocab, source);
  s.say(fmt::format("[train] tokenizer {} from data.tokenizer for {}, which holds none",
                    named->name(), source));
  return named;
}

}  // namespace

// The batch loader's options: training.dataloader_num_workers threads, pinned buffers when the
// ranks use CUDA.
data::BatchLoaderOptions loader_options(TrainSession& s) {
  const auto& t = s.cfg.training;
  const bool cuda = s.world.device().is_cuda();
  if (t.dataloader_pin_memory && !cuda) {
    s.say("[train] training.dataloader_pin_memory=true has no effect on CPU: pinned memory "
          "speeds up copies to a GPU, and these ranks train on the CPU");
  }
  data::BatchLoaderOptions o;
  o.batch_size = t.per_device_train_batch_size;
  o.num_workers = static_cast<int>(t.dataloader_num_workers);
  o.prefetch_factor = static_cast<int>(t.dataloader_prefetch_factor);
  o.pin_memory = t.dataloader_pin_memory && cuda;
  if (o.num_workers > 0) {
    s.say(fmt::format("[train] data loader: {} making up to {} batches ahead{}",
                      count_of(o.num_workers, "thread"), o.num_workers * o.prefetch_factor,
                      o.pin_memory ? " in pinned memory" : ""));
  }
  return o;
}

void LanguageModels::prepare_data(TrainSession& s) const {
  const auto& cfg = s.cfg;
  auto& world = s.world;
  const bool lead = s.lead;
  const auto& cache_dir = s.cache_dir;
  auto& tokenizer = s.tokenizer;
  const bool records = is_record_data(cfg.data);
  FSDPP_CHECK_AS(ConfigError,
                 !records || !cfg.data.tokenizer_is("sentencepiece") ||
                     !cfg.data.tokenizer_model.empty() || s.init,
                 "[train] data.tokenizer=sentencepiece trains a tokenizer on text, and data.path "
                 "holds records; give the model's tokenizer (data.tokenizer=<a tokenizer.json, a "
                 "Hugging Face model directory or a .model file>) or model.init_from");
  // Text is joined into one corpus file (also what a sentencepiece tokenizer trains on).
  const fs::path corpus = records ? fs::path() : corpus_file(cfg.data, cache_dir, world);
  tokenizer = run_tokenizer(s, [&] { return make_tokenizer(cfg.data, corpus, cache_dir, world); });
  check_tokenizer_agrees(s, *tokenizer);
  if (records) {
    prepare_record_batches(s);
    return;
  }
  // Text is one token stream cut into windows: it has no documents to pack or to mask apart.
  FSDPP_CHECK_AS(ConfigError, !cfg.data.packing && !cfg.data.padding_free.value_or(false),
                 "[train] data.{}=true packs or masks the documents of records, and data.path {} "
                 "is text, whose training windows are cut from one token stream. Give records "
                 "(JSON Lines, Parquet, Arrow, a save_to_disk directory) or leave it out",
                 cfg.data.packing ? "packing" : "padding_free", cfg.data.path);
  data::TokenDatasetOptions dopts;
  dopts.cache_dir = cache_dir;
  // Rank 0 encodes; the others then map the cached token file.
  std::optional<data::TokenDataset> dataset;
  dist::agree_on_failure(*world.group(), "tokenizing data.path", [&] {
    if (lead) dataset = data::TokenDataset::open(corpus, *tokenizer, dopts);
  });
  dist::agree_on_failure(*world.group(), "opening the token cache", [&] {
    if (!lead) dataset = data::TokenDataset::open(corpus, *tokenizer, dopts);
  });
  auto splits = dataset->split(cfg.data.val_fraction);
  if (cfg.data.train_fraction < 1) {
    // The first fraction of the training split (a student that sees part of the data).
    const auto n = static_cast<int64_t>(std::llround(static_cast<double>(splits.first.size()) *
                                                     cfg.data.train_fraction));
    splits.first = splits.first.subrange(0, n);
  }
  const data::TokenDataset& train_data = splits.first;
  const data::TokenDataset& val_data = splits.second;
  s.say(fmt::format("[train] data: {} ({} tokens, tokenizer {}, vocab {}); train {} / validation {} tokens",
                    cfg.data.path, dataset->size(), tokenizer->name(), tokenizer->vocab_size(),
                    train_data.size(), val_data.size()));

  // The ranks of a tp group take the same batches: the data splits over the dp ranks.
  const ParallelDims& dims = s.dims;
  const std::string dp_ranks = count_of(dims.dp(), dims.tensor_parallel() ? "data-parallel rank" : "rank");
  const data::SamplerOptions sopts{.seq_len = cfg.data.seq_len, .share = s.share(/*shuffle=*/true)};
  data::DistributedSampler& sampler = s.sampler.emplace(train_data, sopts);
  FSDPP_CHECK_AS(ConfigError, sampler.windows_per_rank() >= 1,
                 "[train] the training split has {} tokens: too few for seq_len={} on {}",
                 train_data.size(), cfg.data.seq_len, dp_ranks);
  // The validation split is evaluated at the end of every run (and every eval_steps): a split
  // without a window of seq_len+1 tokens for every rank would fail there, after the training
  // steps and before the final save, so it is refused here, before any step.
  if (val_data.size() > 0) {
    const int64_t val_windows = (val_data.size() - 1) / cfg.data.seq_len;
    FSDPP_CHECK_AS(ConfigError, val_windows >= dims.dp(),
                   "[train] the validation split (data.val_fraction={}) has {} tokens: {} of "
                   "seq_len+1={} tokens for {}; expected at least one window per rank (raise "
                   "data.val_fraction, use more text, shorten data.seq_len, or set "
                   "data.val_fraction=0 to train without validation)",
                   cfg.data.val_fraction, val_data.size(), count_of(val_windows, "window"),
                   cfg.data.seq_len + 1, dp_ranks);
    s.eval_batches = token_windows(val_data, cfg.data.seq_len);
  }
  s.batches = std::make_unique<TokenBatches>(sampler, loader_options(s));
  s.tokens_per_example = cfg.data.seq_len;
}

}  // namespace fsdpp::train::detail
