// TrainConfig's checks and what it hands out to the trainer, its checkpointer, the memory check
// and fsdpp-estimate. Its keys are in config_keys.cpp, the schema engine in fsdpp/config/schema.h.
#include "fsdpp/train/config.h"
#include "fsdpp/train/parallel_dims.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <utility>

#include "fsdpp/config/schema.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/models/qwen3_moe_ep.h"

namespace fsdpp::train {

namespace {

using config::schema::edit_distance;
using config::schema::join;
using config::schema::quote;

// ---------------------------------------------------------------------------------------------
// validate() helpers.

template <typename... Args>
void check(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) throw ConfigError(fmt::format(format, std::forward<Args>(args)...));
}

// LlamaConfig::validate's "[models] LlamaConfig.dim=..." as "[config] model.dim=...".
void validate_llama(const models::LlamaConfig& cfg) {
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    constexpr std::string_view kPrefix = "[models] LlamaConfig.";
    if (msg.rfind(kPrefix, 0) == 0) {
      msg = "[config] model." + msg.substr(kPrefix.size());
    } else {
      msg = "[config] model: " + msg;
    }
    throw ConfigError(msg);
  }
}

models::LlamaConfig to_llama(const ModelSection& m, int64_t vocab_size, uint64_t seed) {
  models::LlamaConfig cfg;
  cfg.vocab_size = vocab_size;
  cfg.dim = m.dim;
  cfg.n_layers = m.n_layers;
  cfg.n_heads = m.n_heads;
  cfg.n_kv_heads = m.n_kv_heads;
  cfg.ffn_hidden = m.ffn_hidden;
  cfg.multiple_of = m.multiple_of;
  cfg.max_seq_len = m.max_seq_len;
  cfg.norm_eps = m.norm_eps;
  cfg.rope_theta = m.rope_theta;
  cfg.tie_embeddings = m.tie_embeddings;
  cfg.seed = seed;
  cfg.init_std = m.init_std;
  return cfg;
}

models::Qwen3MoeConfig to_qwen3_moe(const ModelSection& m, int64_t vocab_size, uint64_t seed) {
  // The dense keys through the Llama's rules (n_kv_heads 0, ffn_hidden 0), then Hugging Face's
  // names for them.
  const auto l = to_llama(m, vocab_size, seed);
  models::Qwen3MoeConfig c;
  c.vocab_size = vocab_size;
  c.hidden_size = l.dim;
  c.intermediate_size = l.ffn_hidden_dim();
  c.num_hidden_layers = l.n_layers;
  c.num_attention_heads = l.n_heads;
  c.num_key_value_heads = l.kv_heads();
  c.head_dim = m.head_dim > 0 ? m.head_dim : (l.n_heads > 0 ? l.dim / l.n_heads : 0);
  c.num_experts = m.num_experts;
  c.num_experts_per_tok = m.num_experts_per_tok;
  c.moe_intermediate_size =
      m.moe_intermediate_size > 0
          ? m.moe_intermediate_size
          : std::max<int64_t>(1, l.ffn_hidden_dim() / std::max<int64_t>(1, m.num_experts_per_tok));
  c.norm_topk_prob = m.norm_topk_prob;
  c.decoder_sparse_step = m.decoder_sparse_step;
  c.mlp_only_layers = m.mlp_only_layers;
  c.router_aux_loss_coef = m.router_aux_loss_coef;
  c.max_position_embeddings = l.max_seq_len;
  c.rms_norm_eps = l.norm_eps;
  c.rope_theta = l.rope_theta;
  c.tie_word_embeddings = l.tie_embeddings;
  c.initializer_range = l.init_std;
  c.seed = seed;
  return c;
}

// Qwen3MoeConfig's own checks, its messages naming model: keys.
void validate_qwen3_moe(const models::Qwen3MoeConfig& c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("[config] model.architecture=qwen3_moe: ") + e.what());
  }
}

// fsdpp-train's model's shape against the parallel degrees, none of which needs the world: each
// rank of a tp group computes whole heads (and an equal share of the sequence under sequence
// parallelism), each rank of an ep group an equal number of experts, a pipeline's stages have no
// table to share. The models' own checks, which their plans would throw once the model is built,
// with the config's keys in front. Not validate_run's: another model (train()'s) has its own.
void check_layout(const TrainConfig& cfg) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallelism;
  const int64_t tp = p.tensor_parallel_degree, ep = p.expert_parallel_degree;
  check(ep == 1 || m.architecture == ModelArchitecture::QWEN3_MOE,
        "[config] parallelism.expert_parallel_degree={} needs experts: model.architecture=qwen3_moe "
        "(got {})",
        ep, m.architecture.name());
  check(p.pipeline_parallel_degree == 1 || !m.tie_embeddings,
        "[config] model.tie_embeddings=true with parallelism.pipeline_parallel_degree={}: the tied "
        "table would live on the first and the last stage; untie it",
        p.pipeline_parallel_degree);
  auto keyed = [](const std::string& keys, const auto& model_check) {
    try {
      model_check();
    } catch (const ConfigError& e) {
      std::string why = e.what();
      if (const auto close = why.find("] "); why.rfind('[', 0) == 0 && close != std::string::npos) {
        why = why.substr(close + 2);  // "[tp] " / "[models] ": the keys say where
      }
      throw ConfigError(fmt::format("[config] {}: {}", keys, why));
    }
  };
  if (tp > 1 && m.architecture == ModelArchitecture::LLAMA) {
    // The vocabulary is the tokenizer's when model.vocab_size is 0, not known yet: the degree
    // stands in for it (checked when the model is built).
    keyed(fmt::format("model.n_heads={}, model.n_kv_heads={} with "
                      "parallelism.tensor_parallel_degree={}",
                      m.n_heads, m.n_kv_heads, tp),
          [&] {
            models::check_tensor_parallel(to_llama(m, m.vocab_size > 0 ? m.vocab_size : tp, 0),
                                          static_cast<int>(tp));
          });
  }
  const int64_t seq = cfg.data.seq_len;
  check(!p.enable_sequence_parallel || seq % tp == 0,
        "[config] data.seq_len={} with parallelism.enable_sequence_parallel=true and "
        "tensor_parallel_degree={}: each rank of the tp group holds an equal share of the "
        "sequence; use a data.seq_len divisible by {} (such as {})",
        seq, tp, tp, seq - seq % tp > 0 ? seq - seq % tp : tp);
  if (ep > 1 && m.architecture == ModelArchitecture::QWEN3_MOE) {
    keyed(fmt::format("model.num_experts={} with parallelism.expert_parallel_degree={}",
                      m.num_experts, ep),
          [&] {
            models::check_expert_parallel(to_qwen3_moe(m, m.vocab_size > 0 ? m.vocab_size : 1, 0),
                                          static_cast<int>(ep));
          });
  }
}

// fsdpp-train's model: and data: sections, each on its own and against the other.
void validate_model_sections(const TrainConfig& cfg) {
  const auto& model = cfg.model;
  const auto& data = cfg.data;
  const auto& training = cfg.training;
  // model:
  check(model.vocab_size >= 0,
        "[config] model.vocab_size={}: expected 0 (the tokenizer's vocabulary) or > 0",
        model.vocab_size);
  // The vocabulary is checked against the tokenizer in llama_config(); 1 stands in for it here.
  validate_llama(to_llama(model, model.vocab_size > 0 ? model.vocab_size : 1, training.seed));
  if (model.architecture == ModelArchitecture::QWEN3_MOE) {
    validate_qwen3_moe(to_qwen3_moe(model, model.vocab_size > 0 ? model.vocab_size : 1, training.seed));
  }

  // data:
  check(!data.path.empty() || !data.mixture.empty(),
        "[config] data.path is empty; expected a text file or a directory of text files, data "
        "records (JSON Lines, Parquet, Arrow, a datasets directory, a glob of shards) or a "
        "directory fsdpp-data prepare wrote; or data.mixture: a list of {{path, weight}}");
  check(data.path.empty() || data.mixture.empty(),
        "[config] data.path={} and data.mixture are both set; expected one: data.path for one "
        "dataset, data.mixture for several",
        quote(data.path));
  for (size_t i = 0; i < data.mixture.size(); ++i) {
    check(!data.mixture[i].path.empty(), "[config] data.mixture[{}].path is empty", i);
    check(data.mixture[i].weight > 0 && std::isfinite(data.mixture[i].weight),
          "[config] data.mixture[{}].weight={}: expected a finite number > 0", i,
          data.mixture[i].weight);
  }
  // data.tokenizer: a kind, or a file; what the file holds is checked when it is read.
  if (!data.tokenizer_is("byte") && !data.tokenizer_is("sentencepiece")) {
    std::error_code ec;
    const bool near = edit_distance(data.tokenizer, "byte") <= 2 ||
                      edit_distance(data.tokenizer, "sentencepiece") <= 3;
    check(std::filesystem::exists(data.tokenizer, ec),
          "[config] data.tokenizer={}: expected one of byte, sentencepiece, or the path of a "
          "Hugging Face tokenizer.json, a directory holding one (a Hugging Face model "
          "directory) or a SentencePiece .model file; {}",
          quote(data.tokenizer),
          near ? "no such file (did you mean 'byte' or 'sentencepiece'?)" : "no such file or directory");
  }
  check(data.tokenizer_is("sentencepiece") || data.tokenizer_model.empty(),
        "[config] data.tokenizer_model={} is set but data.tokenizer={}; expected "
        "data.tokenizer=sentencepiece with a .model file, or no tokenizer_model",
        quote(data.tokenizer_model), quote(data.tokenizer));
  check(!data.dataset_text_field.empty(),
        "[config] data.dataset_text_field is empty; expected the name of the records' text "
        "field (TRL's default: text)");
  check(data.tokenizer_vocab_size >= 1, "[config] data.tokenizer_vocab_size={}: expected >= 1",
        data.tokenizer_vocab_size);
  check(data.seq_len >= 1, "[config] data.seq_len={}: expected >= 1", data.seq_len);
  check(data.seq_len <= model.max_seq_len,
        "[config] data.seq_len={} is longer than model.max_seq_len={}; expected 1 <= seq_len <= "
        "max_seq_len",
        data.seq_len, model.max_seq_len);
  check(data.val_fraction >= 0 && data.val_fraction < 1,
        "[config] data.val_fraction={}: expected 0 <= val_fraction < 1", data.val_fraction);
  check(data.train_fraction > 0 && data.train_fraction <= 1,
        "[config] data.train_fraction={}: expected 0 < train_fraction <= 1 (the first fraction "
        "of the training split is trained on)",
        data.train_fraction);
  if (model.vocab_size > 0 && data.tokenizer_is("byte")) {
    check(model.vocab_size >= 256,
          "[config] model.vocab_size={} is smaller than the byte tokenizer's 256 tokens; expected "
          "0 (the tokenizer's) or >= 256",
          model.vocab_size);
  }
  if (model.vocab_size > 0 && data.tokenizer_is("sentencepiece") &&
      data.tokenizer_model.empty()) {
    check(model.vocab_size >= data.tokenizer_vocab_size,
          "[config] model.vocab_size={} is smaller than data.tokenizer_vocab_size={}; expected 0 "
          "(the tokenizer's) or >= {}",
          model.vocab_size, data.tokenizer_vocab_size, data.tokenizer_vocab_size);
  }
}

}  // namespace

void TrainConfig::validate() const {
  validate_model_sections(*this);
  validate_run();
  if (model.init_from.empty()) check_layout(*this);
}

void TrainConfig::validate_layout() const { check_layout(*this); }

void TrainConfig::validate_run() const {
  // training.fsdp_config:
  const auto& f = training.fsdp_config;
  if (f.auto_wrap_policy == AutoWrapPolicy::TRANSFORMER_BASED_WRAP) {
    check(!f.transformer_layer_cls_to_wrap.empty(),
          "[config] training.fsdp_config.fsdp_transformer_layer_cls_to_wrap is empty but "
          "fsdp_auto_wrap_policy=TRANSFORMER_BASED_WRAP; expected class names such as "
          "[TransformerBlock]");
  }
  for (const auto& name : f.transformer_layer_cls_to_wrap) {
    check(!name.empty(),
          "[config] training.fsdp_config.fsdp_transformer_layer_cls_to_wrap has an empty name; "
          "expected class names such as [TransformerBlock]");
  }
  check(f.min_num_params >= 1,
        "[config] training.fsdp_config.fsdp_min_num_params={}: expected >= 1", f.min_num_params);
  check(f.reduce_bucket_size >= 0,
        "[config] training.fsdp_config.fsdp_reduce_bucket_size={}: expected 0 (one reduction "
        "per unit) or gradient elements per bucket >= 1",
        f.reduce_bucket_size);
  check(!f.keep_ends_gathered ||
            (parallelism.pipeline_parallel_degree == 1 && parallelism.expert_parallel_degree == 1),
        "[config] training.fsdp_config.fsdp_keep_ends_gathered=true with pipeline or expert "
        "parallelism; expected false there (it keeps the root and the last block of one "
        "FSDP model)");
  check(f.hybrid_shard_group_size >= 0,
        "[config] training.fsdp_config.fsdp_hybrid_shard_group_size={}: expected 0 "
        "(LOCAL_WORLD_SIZE, one shard group per node) or a number of ranks >= 1",
        f.hybrid_shard_group_size);

  // training:
  const auto& t = training;
  check(!(t.bf16 && t.fp16),
        "[config] training.bf16=true and training.fp16=true; expected at most one of them true");
  check(t.gradient_checkpointing || t.gradient_checkpointing_mode == CheckpointingMode::FULL,
        "[config] training.gradient_checkpointing_mode={} without "
        "training.gradient_checkpointing=true: the mode says what a checkpointed block keeps; "
        "set training.gradient_checkpointing=true",
        t.gradient_checkpointing_mode.name());
  check(t.gradient_checkpointing_every >= 1,
        "[config] training.gradient_checkpointing_every={}: expected >= 1 (1: every block, k: "
        "every k-th)",
        t.gradient_checkpointing_every);
  check(t.per_device_train_batch_size >= 1,
        "[config] training.per_device_train_batch_size={}: expected >= 1",
        t.per_device_train_batch_size);
  check(t.per_device_eval_batch_size >= 1,
        "[config] training.per_device_eval_batch_size={}: expected >= 1",
        t.per_device_eval_batch_size);
  check(t.gradient_accumulation_steps >= 1,
        "[config] training.gradient_accumulation_steps={}: expected >= 1",
        t.gradient_accumulation_steps);
  // A thread per worker: more than a few dozen is a typo, not a machine.
  check(t.dataloader_num_workers >= 0 && t.dataloader_num_workers <= 64,
        "[config] training.dataloader_num_workers={}: expected 0 (batches made on the training "
        "thread) to 64 background threads",
        t.dataloader_num_workers);
  check(t.dataloader_prefetch_factor >= 1 && t.dataloader_prefetch_factor <= 64,
        "[config] training.dataloader_prefetch_factor={}: expected 1 to 64 batches made ahead "
        "per worker",
        t.dataloader_prefetch_factor);
  check(t.learning_rate > 0 && std::isfinite(t.learning_rate),
        "[config] training.learning_rate={}: expected a finite number > 0", t.learning_rate);
  check(t.warmup_steps >= 0, "[config] training.warmup_steps={}: expected >= 0", t.warmup_steps);
  check(t.warmup_ratio >= 0 && t.warmup_ratio <= 1,
        "[config] training.warmup_ratio={}: expected a fraction of the run's steps in [0, 1]", t.warmup_ratio);
  check(t.weight_decay >= 0 && std::isfinite(t.weight_decay),
        "[config] training.weight_decay={}: expected a finite number >= 0", t.weight_decay);
  check(t.adam_beta1 >= 0 && t.adam_beta1 < 1,
        "[config] training.adam_beta1={}: expected 0 <= adam_beta1 < 1", t.adam_beta1);
  check(t.adam_beta2 >= 0 && t.adam_beta2 < 1,
        "[config] training.adam_beta2={}: expected 0 <= adam_beta2 < 1", t.adam_beta2);
  check(t.adam_epsilon > 0 && std::isfinite(t.adam_epsilon),
        "[config] training.adam_epsilon={}: expected a finite number > 0", t.adam_epsilon);
  check(t.max_grad_norm >= 0 && std::isfinite(t.max_grad_norm),
        "[config] training.max_grad_norm={}: expected a finite number >= 0 (0: no clipping)",
        t.max_grad_norm);
  check(t.max_steps == -1 || t.max_steps >= 1,
        "[config] training.max_steps={}: expected a number of steps >= 1, or -1 to train for "
        "training.num_train_epochs",
        t.max_steps);
  check(t.num_train_epochs >= 0 && std::isfinite(t.num_train_epochs),
        "[config] training.num_train_epochs={}: expected a finite number >= 0",
        t.num_train_epochs);
  check(t.max_steps > 0 || t.num_train_epochs > 0,
        "[config] training.max_steps={} and training.num_train_epochs={} set no length of "
        "training; expected max_steps >= 1, or max_steps=-1 with num_train_epochs > 0",
        t.max_steps, t.num_train_epochs);
  check(t.logging_steps >= 1, "[config] training.logging_steps={}: expected >= 1",
        t.logging_steps);
  check(t.eval_steps >= 0, "[config] training.eval_steps={}: expected >= 0 (0: only at the end)",
        t.eval_steps);
  check(t.eval_max_batches >= 1, "[config] training.eval_max_batches={}: expected >= 1",
        t.eval_max_batches);
  check(t.save_steps >= 0, "[config] training.save_steps={}: expected >= 0", t.save_steps);
  check(t.save_strategy == SaveStrategy::STEPS || t.save_steps == 0,
        "[config] training.save_steps={} is used only with training.save_strategy=steps, not "
        "'{}'; set one of them",
        t.save_steps, t.save_strategy);
  // glibc refuses thresholds above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit systems).
  check(t.malloc_mmap_threshold >= 0 && t.malloc_mmap_threshold <= (int64_t{32} << 20),
        "[config] training.malloc_mmap_threshold={}: expected bytes in [0, 33554432] (0: glibc's "
        "dynamic threshold)",
        t.malloc_mmap_threshold);
  check(t.save_total_limit >= 0,
        "[config] training.save_total_limit={}: expected >= 0 (0: keep every checkpoint)",
        t.save_total_limit);
  check(!t.output_dir.empty(), "[config] training.output_dir is empty; expected a directory");
  check(t.optim.empty() || t.optim == "adamw_torch" || t.optim == "adamw_torch_fused",
        "[config] training.optim='{}': fsdpp trains with AdamW; expected adamw_torch, "
        "adamw_torch_fused or empty (fused on a GPU)",
        t.optim);
  // report_to: Hugging Face's integration names; fsdpp has TensorBoard's. Another one (wandb,
  // mlflow, ...) is an error rather than a run that silently reports nowhere.
  for (const auto& name : t.report_to) {
    check(name == "tensorboard" || name == "all" || name == "none",
          "[config] training.report_to has '{}': fsdpp reports to tensorboard only; expected "
          "tensorboard, all or none (or a list of them)",
          name);
    check(t.report_to.size() == 1 || name == "tensorboard",
          "[config] training.report_to=[{}]: '{}' stands alone; expected tensorboard, all or none",
          join(t.report_to, ", "), name);
  }
  check(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1,
        "[config] training.min_lr_ratio={}: expected 0 <= min_lr_ratio <= 1", t.min_lr_ratio);
  check(t.sample_tokens >= 0, "[config] training.sample_tokens={}: expected >= 0 (0: no sample)",
        t.sample_tokens);
  check(t.sample_tokens == 0 || !t.sample_prompt.empty(),
        "[config] training.sample_prompt is empty but training.sample_tokens={}; expected a "
        "prompt of at least one character, or sample_tokens=0",
        t.sample_tokens);
  check(t.sample_temperature >= 0 && std::isfinite(t.sample_temperature),
        "[config] training.sample_temperature={}: expected a finite number >= 0 (0: greedy)",
        t.sample_temperature);
  check(t.sample_top_k >= 0, "[config] training.sample_top_k={}: expected >= 0 (0: no top-k)",
        t.sample_top_k);
  for (int64_t step : t.profile_steps) {
    check(step >= 1, "[config] training.profile_steps has {}: expected steps >= 1", step);
    check(t.max_steps == -1 || step <= t.max_steps,
          "[config] training.profile_steps has {}, beyond training.max_steps={}: that step never "
          "runs, so nothing would be traced; expected steps 1..{}",
          step, t.max_steps, t.max_steps);
  }
  // parallelism: (what needs the world size is checked by parallel_dims)
  validate_parallelism(*this);
  distillation.validate({.seq_len = data.seq_len,
                         .tensor_parallel = parallelism.tensor_parallel_degree,
                         .sequence_parallel = parallelism.enable_sequence_parallel,
                         .pipeline_parallel = parallelism.pipeline_parallel_degree});
}

bool TrainingSection::report_to_tensorboard() const {
  return std::any_of(report_to.begin(), report_to.end(),
                     [](const std::string& n) { return n == "tensorboard" || n == "all"; });
}

models::Qwen3MoeConfig TrainConfig::qwen3_moe_config(int64_t tokenizer_vocab_size) const {
  const auto l = llama_config(tokenizer_vocab_size);  // the vocabulary's checks
  const auto c = to_qwen3_moe(model, l.vocab_size, training.seed);
  validate_qwen3_moe(c);
  return c;
}

models::LlamaConfig TrainConfig::llama_config(int64_t tokenizer_vocab_size) const {
  check(tokenizer_vocab_size >= 1,
        "[config] the tokenizer's vocabulary size {} is not positive; expected >= 1",
        tokenizer_vocab_size);
  check(model.vocab_size == 0 || model.vocab_size >= tokenizer_vocab_size,
        "[config] model.vocab_size={} is smaller than the tokenizer's vocabulary ({} tokens); "
        "expected 0 (use the tokenizer's) or >= {}",
        model.vocab_size, tokenizer_vocab_size, tokenizer_vocab_size);
  const auto cfg = to_llama(model, model.vocab_size > 0 ? model.vocab_size : tokenizer_vocab_size,
                            training.seed);
  validate_llama(cfg);
  return cfg;
}

FullyShardOptions TrainConfig::fully_shard_options(std::shared_ptr<dist::DeviceMesh> mesh) const {
  const auto& t = training;
  const auto& fc = t.fsdp_config;
  FullyShardOptions o;
  o.mesh = std::move(mesh);
  o.strategy = t.fsdp;
  // Mixed precision: bf16/fp16 compute and gathers; gradients reduced in float32 (as exact as
  // full precision for twice the reduce bytes of bf16) into float32 master shards.
  if (t.bf16 || t.fp16) {
    o.mp_policy.param_dtype = t.bf16 ? at::kBFloat16 : at::kHalf;
    o.mp_policy.reduce_dtype = at::kFloat;
  }
  o.offload_policy.offload_params = fc.offload_params;
  o.backward_prefetch = fc.backward_prefetch;
  o.sync_module_states = fc.sync_module_states;
  // Hugging Face's booleans: one unit gathered ahead in forward; fully_shard's bound on the
  // gathers in flight, or none.
  o.forward_prefetch = fc.forward_prefetch ? 1 : 0;
  if (!fc.limit_all_gathers) o.limit_all_gathers = 0;
  o.reduce_bucket_size = fc.reduce_bucket_size;
  return o;
}

WrapPolicy TrainConfig::wrap_policy() const {
  const auto& fc = training.fsdp_config;
  switch (fc.auto_wrap_policy) {
    case AutoWrapPolicy::TRANSFORMER_BASED_WRAP:
      return transformer_layer_policy(fc.transformer_layer_cls_to_wrap);
    case AutoWrapPolicy::SIZE_BASED_WRAP:
      // The modules of fsdpp's Llama that its parents call through fsdpp::forward, the only
      // ones that can be units (wrap_policy.h).
      return size_based_policy(fc.min_num_params, {"TransformerBlock", "Attention", "FeedForward"});
    case AutoWrapPolicy::NO_WRAP:
      break;
  }
  return {};
}

state::SaveOptions TrainConfig::state_dict_options() const {
  state::SaveOptions o;
  o.type = training.fsdp_config.state_dict_type;
  return o;
}

int TrainConfig::hybrid_shard_group_size(int local_world_size) const {
  const int64_t g = training.fsdp_config.hybrid_shard_group_size;
  return g > 0 ? static_cast<int>(g) : local_world_size;
}

distill::RunParts TrainConfig::distill_run(int64_t student_vocab) const {
  return {.student_vocab = student_vocab,
          .seq_len = data.seq_len,
          .seed = training.seed,
          .init_from = model.init_from,
          .deferred_init = model.deferred_init != DeferredInit::OFF,
          .limit_all_gathers = training.fsdp_config.limit_all_gathers};
}

EstimateOptions TrainConfig::estimate_options(const parallel::ParallelDims& dims) const {
  EstimateOptions o = estimate_options();
  o.world_size = dims.world_size();
  o.tensor_parallel = dims.tp;
  o.expert_parallel = dims.ep;
  o.pipeline.degree = dims.pp;
  o.shard_group_size = traits_of(training.fsdp).hybrid ? dims.dp_shard : 0;
  o.replicas = 0;
  return o;
}

EstimateOptions TrainConfig::estimate_options() const {
  EstimateOptions o = estimate_options_of(fully_shard_options(nullptr));
  o.world_size = 1;
  o.shard_group_size = hybrid_shard_group_size(0);
  // Selective checkpointing keeps the projections' products, which the estimate's ledger has no
  // term for yet: counted as no checkpointing, an upper bound on its activations.
  o.activation_checkpointing = training.gradient_checkpointing &&
                               training.gradient_checkpointing_mode == CheckpointingMode::FULL;
  o.batch = training.per_device_train_batch_size;
  o.seq_len = data.seq_len;
  o.mmap_threshold = training.malloc_mmap_threshold;
  o.deferred_init = model.deferred_init != DeferredInit::OFF;
  // parallelism: tp slices, FSDP over the rest; with replicas a shard group is the shard degree,
  // or the data-parallel ranks over the replicas once the world is known (estimate_shard_group).
  const auto& p = parallelism;
  o.tensor_parallel = static_cast<int>(p.tensor_parallel_degree);
  o.sequence_parallel = p.enable_sequence_parallel;
  if (p.data_parallel_replicate_degree > 1) {
    o.shard_group_size = static_cast<int>(std::max<int64_t>(0, p.data_parallel_shard_degree));
    o.replicas = static_cast<int>(p.data_parallel_replicate_degree);
  }
  return o;
}

std::vector<std::string> resolve_data_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  check(fs::exists(st), "[config] data.path='{}' does not exist; expected a text file or a "
        "directory of text files", path);
  if (!fs::is_directory(st)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!fs::is_regular_file(entry.symlink_status())) continue;  // symlinks, directories, ...
    const std::string ext = entry.path().extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    files.push_back(entry.path().string());
  }
  check(!ec, "[config] cannot list data.path='{}': {}", path, ec.message());
  std::sort(files.begin(), files.end());
  check(!files.empty(),
        "[config] data.path='{}' is a directory without text files; expected regular files "
        "(not symlinks, *.dat or *.u8) to concatenate in name order",
        path);
  return files;
}

}  // namespace fsdpp::train
