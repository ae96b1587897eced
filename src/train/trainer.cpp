#include "fsdpp/train/trainer.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/token_dataset.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/data/printable_text.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/dist/trace.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/optim/disk_offload.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/grad_scaler.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/optim/nonfinite_grad.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/state_dict.h"
#include "fsdpp/train/lr_schedule.h"
#include "fsdpp/train/memory_check.h"
#include "checkpointer.h"
#include "heartbeat.h"
#include "init_from.h"
#include "metrics_log.h"
#include "output_dir.h"
#include "progress.h"
#include "restart_count.h"
#include "stop_signal.h"
#include "tensorboard.h"

namespace fs = std::filesystem;

namespace fsdpp::train {
namespace {

using Clock = std::chrono::steady_clock;

double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half.
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FSDPP_CHECK(out.good(), "[train] cannot write '{}'", tmp.string());
    out << text;
  }
  fs::rename(tmp, path);
}

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
    write_atomically(out, text);
  });
  return out;
}

std::unique_ptr<data::Tokenizer> make_tokenizer(const DataSection& data, const fs::path& corpus,
                                                const fs::path& cache_dir, dist::World& world) {
  if (data.tokenizer == TokenizerType::BYTE) return std::make_unique<data::ByteTokenizer>();
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

// Checkpoint directories and trainer_state.json: checkpointer.h.
using detail::list_checkpoints;
using detail::read_trainer_state;
using detail::TrainerState;

// metrics.jsonl without the lines of steps after `step` (left by a run that went on past the
// checkpoint it is resumed from), rewritten atomically; then appended to.
void truncate_metrics(const fs::path& path, int64_t step) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).at("step").get<int64_t>() > step) continue;
    } catch (const nlohmann::json::exception&) {
      continue;  // a half-written last line of a killed run
    }
    kept += line + "\n";
  }
  in.close();
  write_atomically(path, kept);
}

// Throws naming the step and where the non-finite values came from: the loss when some rank's
// loss is non-finite (then every gradient is too), else the first parameter whose gradient is.
// Collective: every rank gets here together, after the all-reduce inside clip_grad_norm_.
[[noreturn]] void stop_on_nonfinite(torch::nn::Module& model, dist::World& world, int64_t step,
                                    double loss_sum) {
  auto flag = torch::tensor({std::isfinite(loss_sum) ? int64_t{0} : int64_t{world.size() - world.rank()}});
  world.group()->all_reduce(flag, dist::ReduceOp::MAX, {"nonfinite_check"});
  const int64_t v = flag.item<int64_t>();
  const auto grad = first_nonfinite_grad(model, world.group().get());
  if (v > 0) {
    FSDPP_THROW(Error,
                "[train] step {}: the loss is not finite on rank {}: non-finite values first "
                "appeared in 'loss' (every gradient follows from it); stopped before the "
                "optimizer step, so the parameters are those of step {}. Lower "
                "training.learning_rate, or check the data",
                step, world.size() - v, step - 1);
  }
  FSDPP_THROW(Error,
              "[train] step {}: the gradient of parameter '{}' is {} on rank {} while the loss is "
              "finite: non-finite values first appeared there; stopped before the optimizer "
              "step, so the parameters are those of step {}",
              step, grad ? grad->name : std::string("?"), grad ? grad->kind : "not finite",
              grad ? grad->rank : 0, step - 1);
}

// "1 rank", "2 ranks": counts in messages read as English.
std::string count_of(int64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

}  // namespace

struct Trainer::State {
  TrainConfig cfg;
  std::shared_ptr<dist::World> world;
  TrainerHooks hooks;
};

Trainer::Trainer(TrainConfig config, std::shared_ptr<dist::World> world, TrainerHooks hooks)
    : s_(std::make_unique<State>(State{std::move(config), std::move(world), std::move(hooks)})) {
  s_->cfg.validate();
}

Trainer::~Trainer() = default;

TrainResult Trainer::run() {
  auto& cfg = s_->cfg;  // model.init_from may replace the model section below
  const auto& t = cfg.training;
  auto& world = *s_->world;
  const bool lead = world.rank() == 0;
  auto say = [&](const std::string& line) {
    if (lead) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };

  // ---- output and data --------------------------------------------------------------------
  const fs::path out_dir = t.output_dir;
  const fs::path cache_dir = cfg.data.cache_dir.empty() ? out_dir / "cache" : fs::path(cfg.data.cache_dir);
  // ---- resume: which checkpoint (every rank resolves the same one on the shared file system) --
  fs::path resume_dir;
  // A job that fsdpp-run restarted after a failure (FSDPP_RESTART_COUNT >= 1) goes on from the
  // newest complete checkpoint of output_dir, whatever resume_from_checkpoint says: restarting
  // from an older one (or from scratch) would throw away the steps the failed attempt saved.
  const int restart_count = detail::restart_count_from_env();
  if (restart_count > 0) {
    const auto found = list_checkpoints(out_dir);
    if (!found.empty()) resume_dir = found.back().second;
  }
  if (!resume_dir.empty()) {
    say(fmt::format("[train] restart {}: resuming from the newest checkpoint", restart_count));
  } else if (t.resume_from_checkpoint == "latest") {
    const auto found = list_checkpoints(out_dir);
    if (!found.empty()) resume_dir = found.back().second;
  } else if (!t.resume_from_checkpoint.empty()) {
    resume_dir = t.resume_from_checkpoint;
    FSDPP_CHECK_AS(ConfigError, fs::is_directory(resume_dir),
                   "[train] training.resume_from_checkpoint='{}' is not a directory; expected a "
                   "checkpoint-<step> directory, 'latest' or ''",
                   t.resume_from_checkpoint);
  }
  std::optional<TrainerState> resumed;
  if (!resume_dir.empty()) resumed = read_trainer_state(resume_dir);
  // model.init_from: the source's shape becomes the model section (config.yaml records it); a
  // resume has its own weights and ignores it.
  std::optional<detail::InitSource> init;
  if (!cfg.model.init_from.empty() && resumed) {
    say(fmt::format("[train] model.init_from='{}' is not used: resuming from {} instead",
                    cfg.model.init_from, resume_dir.string()));
  } else if (!cfg.model.init_from.empty()) {
    init.emplace(cfg.model.init_from);
    for (const auto& note : init->apply_shape(cfg.model)) say("[train] model.init_from: " + note);
    cfg.validate();
  }
  world.group()->barrier({"resume"});  // every rank has read before rank 0 touches output_dir
  // Rank 0 alone writes output_dir; a failure there (or in any rank-0-only step below) stops
  // every rank with one line instead of a hang or a page of c10d frames on the others.
  std::optional<detail::OutputDirLock> dir_lock;  // held by rank 0 until run() returns
  std::string lock_warning;
  dist::agree_on_failure(*world.group(), "preparing training.output_dir", [&] {
    if (!lead) return;
    dir_lock.emplace(out_dir, t.overwrite_output_dir, &lock_warning);
    std::error_code ec;
    fs::create_directories(cache_dir, ec);
    FSDPP_CHECK_AS(ConfigError, !ec, "[train] the cache directory '{}' (data.cache_dir) cannot be "
                   "created: {}", cache_dir.string(), ec.message());
    state::cleanup_stale_tmp(out_dir);  // what a killed save left
    write_atomically(out_dir / "config.yaml", cfg.to_yaml());
  });
  if (!lock_warning.empty()) say(lock_warning);
  const fs::path corpus = corpus_file(cfg.data, cache_dir, world);
  // A model starts from its own tokenizer: the one stored with model.init_from's weights.
  std::unique_ptr<data::Tokenizer> tokenizer = init ? init->take_tokenizer() : nullptr;
  if (tokenizer) {
    say(fmt::format("[train] tokenizer {} from model.init_from (data.tokenizer is not used)",
                    tokenizer->name()));
  } else {
    tokenizer = make_tokenizer(cfg.data, corpus, cache_dir, world);
  }
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
  const data::TokenDataset train_data = splits.first;
  const data::TokenDataset val_data = splits.second;
  say(fmt::format("[train] data: {} ({} tokens, tokenizer {}, vocab {}); train {} / validation {} tokens",
                  cfg.data.path, dataset->size(), tokenizer->name(), tokenizer->vocab_size(),
                  train_data.size(), val_data.size()));

  data::SamplerOptions sopts;
  sopts.seq_len = cfg.data.seq_len;
  sopts.rank = world.rank();
  sopts.world_size = world.size();
  sopts.seed = t.seed;
  data::DistributedSampler sampler(train_data, sopts);
  FSDPP_CHECK_AS(ConfigError, sampler.windows_per_rank() >= 1,
                 "[train] the training split has {} tokens: too few for seq_len={} on {}",
                 train_data.size(), cfg.data.seq_len, count_of(world.size(), "rank"));
  // The validation split is evaluated at the end of every run (and every eval_steps): a split
  // without a window of seq_len+1 tokens for every rank would fail there, after the training
  // steps and before the final save, so it is refused here, before any step.
  if (val_data.size() > 0) {
    const int64_t val_windows = (val_data.size() - 1) / cfg.data.seq_len;
    FSDPP_CHECK_AS(ConfigError, val_windows >= world.size(),
                   "[train] the validation split (data.val_fraction={}) has {} tokens: {} of "
                   "seq_len+1={} tokens for {}; expected at least one window per rank (raise "
                   "data.val_fraction, use more text, shorten data.seq_len, or set "
                   "data.val_fraction=0 to train without validation)",
                   cfg.data.val_fraction, val_data.size(), count_of(val_windows, "window"),
                   cfg.data.seq_len + 1, count_of(world.size(), "rank"));
  }

  // ---- model ------------------------------------------------------------------------------
  const int64_t vocab = cfg.model.vocab_size > 0 ? cfg.model.vocab_size : tokenizer->vocab_size();
  FSDPP_CHECK_AS(ConfigError, vocab >= tokenizer->vocab_size(),
                 "[train] model.vocab_size={} is smaller than the tokenizer's vocabulary ({})",
                 vocab, tokenizer->vocab_size());
  if (!t.skip_memory_check && world.backend() == dist::BackendKind::GLOO) {
    // The host's memory is the device's on CPU; a GPU's is not checked here.
    const int local = world.env().local_world_size;
    dist::agree_on_failure(*world.group(), "checking that the run fits in memory", [&] {
      const auto ce = configured_estimate(cfg, vocab, world.size(), local);
      check_memory_fits(estimate_memory(ce.model, ce.options), ce.model.num_params() * 4, local);
    });
  }
  models::Llama model(cfg.llama_config(vocab));
  if (init) init->load_before_sharding(model);
  const int64_t n_params = models::num_parameters(*model);
  say(fmt::format("[train] model: Llama dim {} x {} layers, {} heads ({} kv), vocab {}: {:.2f} M parameters",
                  cfg.model.dim, cfg.model.n_layers, cfg.model.n_heads,
                  cfg.model.n_kv_heads > 0 ? cfg.model.n_kv_heads : cfg.model.n_heads, vocab,
                  n_params / 1e6));

  // FSDP frees and re-allocates unit-sized buffers every step (gathered parameters, reduce
  // inputs), and glibc's dynamic mmap threshold then keeps them in its heap: measured, a 2-rank
  // FULL_SHARD run peaked 35% above its working set, above NO_SHARD. A fixed threshold hands
  // large blocks back to the system at once, for page faults on the next allocation.
  // Process-wide, which the trainer's process may decide (docs/fully-shard.md#memory).
  if (t.malloc_mmap_threshold > 0) {
    FSDPP_CHECK(mallopt(M_MMAP_THRESHOLD, static_cast<int>(t.malloc_mmap_threshold)) == 1,
                "[train] glibc refused training.malloc_mmap_threshold={}",
                t.malloc_mmap_threshold);
  }
  const bool hybrid = traits_of(t.fsdp).hybrid;
  std::shared_ptr<dist::DeviceMesh> mesh = world.mesh();
  if (hybrid) {
    // Shard inside a node (fast links), replicate across nodes: fsdp-run lays ranks out node by
    // node, so the mesh's rows of LOCAL_WORLD_SIZE ranks are the nodes.
    const int shard = cfg.hybrid_shard_group_size(world.env().local_world_size);
    FSDPP_CHECK_AS(ConfigError, shard <= world.size() && world.size() % shard == 0,
                   "[train] training.fsdp={} shards over groups of {} ranks ({}), which must "
                   "divide the world size {}",
                   to_string(t.fsdp), shard,
                   t.fsdp_config.hybrid_shard_group_size > 0
                       ? "training.fsdp_config.fsdp_hybrid_shard_group_size"
                       : "LOCAL_WORLD_SIZE",
                   world.size());
    mesh = world.init_device_mesh({world.size() / shard, shard}, {"replicate", "shard"});
  }
  const FullyShardOptions fopts = cfg.fully_shard_options(mesh);
  const WrapPolicy policy = cfg.wrap_policy();
  const auto& fc = t.fsdp_config;
  if (t.gradient_checkpointing) {
    const auto marked = apply_activation_checkpointing(
        *model, fc.transformer_layer_cls_to_wrap, static_cast<int>(t.gradient_checkpointing_every));
    say(fmt::format("[train] activation checkpointing: {} of {} blocks", marked.size(),
                    cfg.model.n_layers));
  }
  auto units = apply_fully_shard(*model, policy, fopts);
  if (init) {
    init->load_after_sharding(model, world.group());
    say(fmt::format("[train] weights from {} (model.init_from); optimizer, schedule and data "
                    "start afresh at step 1",
                    init->dir().string()));
  }
  say(fmt::format("[train] fsdp: {} over {}{}, {} ({}), {:.2f} M parameters held per rank",
                  to_string(t.fsdp), count_of(world.size(), "rank"),
                  hybrid ? fmt::format(" ({} replicas x {} shards)", fopts.mesh->size(0),
                                       fopts.mesh->size(1))
                         : "",
                  count_of(static_cast<int64_t>(units.size()), "unit"), fc.auto_wrap_policy,
                  models::num_parameters(*model) / 1e6));
  // Bytes over the shard groups (inside a node under hybrid_shard) and over the replicate
  // groups (across nodes) for metrics.jsonl: the units communicate over the mesh's groups only.
  const auto comm_split = [&] {
    std::pair<uint64_t, uint64_t> intra_inter{0, 0};
    if (hybrid) {
      intra_inter = {fopts.mesh->counters("shard").total_bytes(),
                     fopts.mesh->counters("replicate").total_bytes()};
    } else if (!traits_of(t.fsdp).shards) {
      intra_inter.second = comm_counters(*model).total_bytes();
    } else {
      intra_inter.first = comm_counters(*model).total_bytes();
    }
    return intra_inter;
  };

  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(t.learning_rate)
                                                   .betas({t.adam_beta1, t.adam_beta2})
                                                   .eps(t.adam_epsilon)
                                                   .weight_decay(t.weight_decay));
  // fsdp_offload_optimizer_state_dir: the AdamW state lives in a per-rank memory-mapped file.
  // fp16: the sharded dynamic loss scaler (disabled, it is a pass-through for other dtypes).
  GradScalerOptions scaler_options;
  scaler_options.enabled = t.fp16;
  ShardedGradScaler scaler(*model, scaler_options);
  std::unique_ptr<DiskOffloadedOptimizer> offload;
  if (!t.fsdp_config.offload_optimizer_state_dir.empty()) {
    DiskOffloadOptions oo;
    oo.dir = t.fsdp_config.offload_optimizer_state_dir;
    oo.rank = world.rank();
    offload = std::make_unique<DiskOffloadedOptimizer>(opt, oo);
    say(fmt::format("[train] optimizer state offloaded to memory-mapped files in {}",
                    oo.dir.string()));
  }
  const int64_t B = t.per_device_train_batch_size;
  const int64_t accum = t.gradient_accumulation_steps;
  int64_t total_steps = t.max_steps;
  if (total_steps <= 0) {
    const int64_t per_epoch = std::max<int64_t>(1, sampler.windows_per_rank() / (B * accum));
    total_steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(t.num_train_epochs * per_epoch)));
  }
  const LrSchedule schedule = cfg.lr_schedule(total_steps);
  const int64_t tokens_per_step = B * accum * cfg.data.seq_len * world.size();
  say(fmt::format("[train] {} steps of {} sequences x {} tokens ({} tokens per step), AdamW lr {} {} warmup {}",
                  total_steps, B * accum * world.size(), cfg.data.seq_len, tokens_per_step,
                  t.learning_rate, t.lr_scheduler_type, t.warmup_steps));

  // ---- checkpoints ------------------------------------------------------------------------
  // Seeds the generators, and holds the background writer of training.async_save.
  detail::Checkpointer checkpointer(cfg, s_->world, model->config());
  checkpointer.track_grad_scaler(&scaler);
  checkpointer.add_files(data::tokenizer_files(*tokenizer));  // the tokenizer travels with the model
  int64_t first_step = 1;
  if (resumed) {
    checkpointer.restore(resume_dir, *resumed, *model, opt, schedule);  // + generator states
    if (resumed->grad_scaler) scaler.load_state(*resumed->grad_scaler);
    // Only once the checkpoint loaded: a corrupt one must not cost the metrics of the steps
    // after it.
    if (lead) truncate_metrics(out_dir / "metrics.jsonl", resumed->step);
    if (offload) offload->offload_state();  // the loaded state out of memory before step 1
    // The sampler continues after the windows consumed over all ranks, whatever the world size
    // was: each rank is at consumed / world_size in the epoch (exact when it divides).
    data::SamplerState ss{resumed->epoch, resumed->windows_consumed / world.size()};
    if (ss.position >= sampler.windows_per_rank()) ss = {ss.epoch + 1, 0};
    sampler.load_state(ss);
    first_step = resumed->step + 1;
    say(fmt::format("[train] resumed from {} (step {}, saved on {}): epoch {}, {} consumed{}",
                    resume_dir.string(), resumed->step, count_of(resumed->world_size, "rank"),
                    resumed->epoch, count_of(resumed->windows_consumed, "window"),
                    resumed->windows_consumed % world.size() == 0
                        ? ""
                        : fmt::format(" (not a multiple of {}: {} skipped)",
                                      count_of(world.size(), "rank"),
                                      resumed->windows_consumed % world.size())));
  } else if (!t.resume_from_checkpoint.empty()) {
    say(fmt::format("[train] no complete checkpoint in {} to resume from: starting at step 1",
                    out_dir.string()));
  }
  // save_strategy: steps (every save_steps), epoch (every pass over the data), no; unless no,
  // the last step is saved too when the run ends, so that a run always leaves its weights.
  const int64_t steps_per_epoch = std::max<int64_t>(1, sampler.windows_per_rank() / (B * accum));
  int64_t last_saved = resumed ? resumed->step : 0;
  auto save_checkpoint = [&](int64_t step) {
    checkpointer.save(step, *model, opt, sampler.state(), schedule);
    if (offload) offload->release();  // the save read every state page into the process
    last_saved = step;
  };
  auto save_due = [&](int64_t step) {
    if (t.save_strategy == SaveStrategy::STEPS) return t.save_steps > 0 && step % t.save_steps == 0;
    if (t.save_strategy == SaveStrategy::EPOCH) return step % steps_per_epoch == 0;
    return false;
  };

  // ---- evaluation -------------------------------------------------------------------------
  auto evaluate = [&]() -> double {
    if (val_data.size() <= cfg.data.seq_len) return std::nan("");
    data::SamplerOptions vo = sopts;
    vo.shuffle = false;
    data::DistributedSampler val(val_data, vo);
    if (val.windows_per_rank() < 1) return std::nan("");
    torch::NoGradGuard no_grad;
    const int64_t eb = std::min<int64_t>(t.per_device_eval_batch_size, val.windows_per_rank());
    const int64_t batches = std::max<int64_t>(1, std::min<int64_t>(t.eval_max_batches, val.windows_per_rank() / eb));
    double sum = 0;
    for (int64_t i = 0; i < batches; ++i) {
      auto [x, y] = val.next_batch(eb);
      sum += fsdpp::forward(model, x, y).loss.item<double>();
    }
    auto v = torch::tensor({sum / batches}, torch::kDouble);
    world.group()->all_reduce(v, dist::ReduceOp::AVG, {"eval"});
    return v.item<double>();
  };

  // ---- timeline traces ---------------------------------------------------------------------
  // training.profile_steps, else the recorder FSDPP_PROFILE_STEPS gave the World: each rank
  // writes its profiled steps to <output_dir>/traces (docs/observability.md#timeline-traces).
  std::shared_ptr<dist::TraceRecorder> trace = world.trace();
  if (!t.profile_steps.empty()) {
    trace = std::make_shared<dist::TraceRecorder>(
        dist::TraceOptions{world.rank(), t.profile_steps, out_dir / "traces"});
    s_->world->set_trace(trace);
  } else if (trace && std::getenv("FSDPP_TRACE_DIR") == nullptr) {
    trace->set_dir(out_dir / "traces");
  }

  // ---- loop -------------------------------------------------------------------------------
  std::optional<detail::MetricsLog> metrics;
  if (lead) metrics.emplace(out_dir / "metrics.jsonl", resumed.has_value());
  // training.report_to: rank 0 writes TensorBoard event files next to metrics.jsonl's lines
  // (docs/observability.md). A session start makes TensorBoard drop what older files in the
  // directory hold from that step on, as truncate_metrics does: all of it for a fresh run, the
  // steps after the checkpoint for a resumed one.
  std::optional<detail::EventFileWriter> tensorboard;
  if (t.report_to_tensorboard()) {
    dist::agree_on_failure(*world.group(), "opening the TensorBoard event file", [&] {
      if (!lead) return;
      tensorboard.emplace(t.logging_dir.empty() ? out_dir / "runs" : fs::path(t.logging_dir));
      tensorboard->add_session_start(resumed ? first_step : 0);
      tensorboard->add_text("config", "```yaml\n" + cfg.to_yaml() + "```", first_step - 1);
    });
    if (tensorboard) {
      say(fmt::format("[train] TensorBoard: {} (open with tensorboard --logdir {})",
                      tensorboard->path().string(), tensorboard->path().parent_path().string()));
    }
  }
  detail::StopSignal stop_signal;  // SIGTERM/SIGINT: stop after the step in progress
  detail::Heartbeat heartbeat;     // fsdpp-run --progress-timeout-s counts from here
  heartbeat.beat(fmt::format("training from step {} of {}", first_step, total_steps));
  Progress progress(lead, total_steps);
  TrainResult result;
  result.output_dir = out_dir.string();
  result.steps = first_step - 1;
  const auto start = Clock::now();
  double val_loss = std::nan("");
  for (int64_t step = first_step; step <= total_steps; ++step) {
    const auto t0 = Clock::now();
    if (trace) trace->begin_step(step);
    const auto comm_before = comm_counters(*model);
    const auto split_before = comm_split();
    const double lr = schedule.at(step);
    for (auto& group : opt.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    }
    double loss_sum = 0;
    const StepContext hook_context{step, world.rank(), restart_count, *model};
    for (int64_t micro = 0; micro < accum; ++micro) {
      dist::TraceSpan data_span(trace.get(), "data");
      auto [x, y] = sampler.next_batch(B);
      data_span.end();
      dist::TraceSpan forward_span(trace.get(), "forward");
      auto out = fsdpp::forward(model, x, y);
      auto loss = out.loss;
      forward_span.end();
      dist::TraceSpan backward_span(trace.get(), "backward");
      if (s_->hooks.after_loss) s_->hooks.after_loss(hook_context, loss);
      scaler.scale(loss / static_cast<double>(accum)).backward();
      loss_sum += loss.item<double>();
    }
    dist::TraceSpan clip_span(trace.get(), "clip_grad_norm");
    if (s_->hooks.after_backward) s_->hooks.after_backward(hook_context);
    scaler.unscale_();  // fp16: the gradients divided back, and inf/nan agreed over the ranks
    const double grad_norm = clip_grad_norm_(*model, t.max_grad_norm > 0 ? t.max_grad_norm : INFINITY);
    // The norm is non-finite exactly when a gradient element is: one check per step, and the
    // search for the culprit only then. Under fp16 the loss scaler skips such steps instead.
    if (!t.fp16 && !std::isfinite(grad_norm)) stop_on_nonfinite(*model, world, step, loss_sum);
    clip_span.end();
    dist::TraceSpan optimizer_span(trace.get(), "optimizer");
    const bool stepped = !scaler.found_inf();  // an overflow skips the step on every rank
    if (stepped && offload) {
      offload->step();
    } else if (stepped) {
      opt.step();
    }
    const double loss_scale = scaler.get_scale();
    scaler.update();
    opt.zero_grad();
    optimizer_span.end();
    const auto step_end = Clock::now();
    // The step's collectives, per kind, for its trace event (what the trace must hold).
    const auto step_comm = trace && trace->active() ? dist::counter_args(comm_counters(*model) - comm_before)
                                                    : std::vector<dist::TraceArg>{};
    const double step_ms = std::chrono::duration<double, std::milli>(step_end - t0).count();
    // Loss over the global batch and memory over the ranks: one small all-reduce each. A stop
    // signal rides along, so that every rank stops after the same step.
    auto stats = torch::tensor({loss_sum / accum, stop_signal.received() != 0 ? 1.0 : 0.0},
                               torch::kDouble);
    world.group()->all_reduce(stats, dist::ReduceOp::AVG, {"metrics"});
    const double loss = stats[0].item<double>();
    const bool stop_now = stats[1].item<double>() > 0;
    FSDPP_CHECK(std::isfinite(loss), "[train] the loss became {} at step {}", loss, step);
    result.final_loss = loss;
    result.steps = step;
    const bool eval_now = val_data.size() > 0 &&
                          ((t.eval_steps > 0 && step % t.eval_steps == 0) || step == total_steps);
    if (eval_now) {
      dist::TraceSpan eval_span(trace.get(), "eval");
      val_loss = evaluate();
    }
    if (step % t.logging_steps == 0 || step == first_step || step == total_steps || eval_now) {
      auto rss = torch::tensor({peak_rss_mb()}, torch::kDouble);
      world.group()->all_reduce(rss, dist::ReduceOp::MAX, {"metrics"});
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      nlohmann::json j;
      j["step"] = step;
      j["loss"] = loss;
      if (eval_now && std::isfinite(val_loss)) j["val_loss"] = val_loss;
      j["lr"] = lr;
      j["grad_norm"] = grad_norm;
      if (t.fp16) {
        j["loss_scale"] = loss_scale;
        j["skipped_steps"] = scaler.skipped_steps();
        j["step_skipped"] = !stepped;
      }
      j["tokens_per_s"] = tokens_per_step / (step_ms / 1000.0);
      j["step_ms"] = step_ms;
      j["peak_rss_mb"] = rss.item<double>();
      j["comm_bytes"] = (comm_counters(*model) - comm_before).total_bytes();
      const auto split_after = comm_split();
      j["comm_bytes_intra"] = split_after.first - split_before.first;
      j["comm_bytes_inter"] = split_after.second - split_before.second;
      j["elapsed_s"] = elapsed;
      dist::agree_on_failure(*world.group(), "writing metrics.jsonl", [&] {
        if (lead) metrics->append(j.dump());
        if (tensorboard) tensorboard->add_scalars(step, detail::tensorboard_scalars(j));
      });
      progress.log(step, loss, eval_now ? val_loss : std::nan(""), lr, grad_norm,
                   tokens_per_step / (step_ms / 1000.0), step_ms, rss.item<double>(), elapsed);
    } else {
      progress.tick(step, loss, lr, std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (save_due(step)) {
      dist::TraceSpan save_span(trace.get(), "checkpoint_save");
      save_checkpoint(step);
    }
    heartbeat.beat(fmt::format("step {} of {}", step, total_steps));
    // The step's event spans what step_ms measures; eval and saves follow it in the trace.
    if (trace) trace->end_step(step, step_end, step_comm);
    if (stop_now) {
      result.stopped_by_signal = stop_signal.received() != 0 ? stop_signal.received() : SIGTERM;
      break;
    }
  }
  progress.finish();
  if (t.save_strategy != SaveStrategy::NO && result.stopped_by_signal == 0 && result.steps > last_saved) {
    save_checkpoint(result.steps);  // the final model
  }
  checkpointer.finish();  // an asynchronous save still being written: wait, report its error
  result.final_val_loss = val_loss;
  if (result.stopped_by_signal != 0) {
    const auto saved = list_checkpoints(out_dir);
    say(fmt::format("[train] stopped by {} after step {} of {}; {}", strsignal(result.stopped_by_signal),
                    result.steps, total_steps,
                    saved.empty() ? std::string("no checkpoint was saved")
                                  : fmt::format("the newest checkpoint is {}", saved.back().second.string())));
    return result;
  }
  if (first_step > total_steps) {
    say(fmt::format("[train] nothing to train: resumed at step {} and the run has {} steps "
                    "(raise training.max_steps or num_train_epochs to go on)",
                    first_step - 1, total_steps));
    return result;
  }

  // ---- sample -----------------------------------------------------------------------------
  if (t.sample_tokens > 0) {
    auto prompt_ids = tokenizer->encode(t.sample_prompt);
    if (prompt_ids.empty()) prompt_ids.push_back(0);
    auto prompt = torch::tensor(std::vector<int64_t>(prompt_ids.begin(), prompt_ids.end()), torch::kLong);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(t.seed + 1);  // the same on every rank
    torch::NoGradGuard no_grad;
    auto ids = models::generate(model, prompt, t.sample_tokens, t.sample_temperature, t.sample_top_k, gen);
    auto tail = ids.narrow(0, static_cast<int64_t>(prompt_ids.size()), t.sample_tokens).to(torch::kInt);
    std::vector<int32_t> v(tail.data_ptr<int32_t>(), tail.data_ptr<int32_t>() + tail.numel());
    result.sample = t.sample_prompt + tokenizer->decode(v);
    if (lead) write_atomically(out_dir / "sample.txt", result.sample + "\n");
    say("[train] sample:\n" + data::printable_text(result.sample) + "\n");
  }
  say(fmt::format("[train] done: {} steps, final loss {:.4f}, validation loss {:.4f}", result.steps,
                  result.final_loss, result.final_val_loss));
  say(fmt::format("[train] metrics: {}  config: {}{}{}", (out_dir / "metrics.jsonl").string(),
                  (out_dir / "config.yaml").string(),
                  t.sample_tokens > 0 ? "  sample: " + (out_dir / "sample.txt").string() : "",
                  last_saved > 0
                      ? "  checkpoint: " + (out_dir / fmt::format("checkpoint-{}", last_saved)).string()
                      : ""));
  return result;
}

}  // namespace fsdpp::train
