#pragma once
// The trainer's configuration: a YAML file in the shape FSDP / Hugging Face Trainer users already
// write, plus `key.path=value` command-line overrides.
//
//   auto cfg = fsdpp::train::TrainConfig::from_file("configs/default.yaml",
//                                                   {"training.learning_rate=3e-4",
//                                                    "model.n_layers=8"});
//   auto llama = cfg.llama_config(tokenizer->vocab_size());
//   std::cout << cfg.to_yaml();   // the effective config; from_yaml_string reads it back
//
// Layout (docs/config.md lists every key):
//
//   model:    {vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_hidden, ...}
//   data:     {path, tokenizer, tokenizer_model, tokenizer_vocab_size, seq_len, ...}
//   training: {fsdp: full_shard, fsdp_config: {fsdp_auto_wrap_policy, ...},
//              per_device_train_batch_size, learning_rate, max_steps, output_dir, ...}
//
// Every problem is a fsdpp::ConfigError whose message starts with "[config]" and names the full
// key path, the value found and what is accepted: unknown keys (with the closest known key),
// wrong types and out-of-range values.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fsdpp/data/row_plan.h"
#include "fsdpp/distill/distillation.h"
#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/state/state_dict.h"
#include "fsdpp/train/config_enums.h"
#include "fsdpp/train/lr_schedule.h"

namespace fsdpp::train {

// `model:` -> models::LlamaConfig, or models::Qwen3MoeConfig (Hugging Face's names for the
// MoE keys; dim, n_layers, ... are its hidden_size, num_hidden_layers, ...).
struct ModelSection {
  config::Choice<ModelArchitecture> architecture = ModelArchitecture::LLAMA;
  int64_t vocab_size = 0;  // 0: the tokenizer's vocabulary size
  int64_t dim = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;  // 0: n_heads
  int64_t ffn_hidden = 0;  // 0: Llama's rule (2/3 * 4 * dim rounded up to multiple_of)
  int64_t multiple_of = 32;
  int64_t max_seq_len = 128;
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  double init_std = 0.02;
  bool tie_embeddings = false;
  // qwen3_moe only.
  int64_t head_dim = 0;                // 0: dim / n_heads
  int64_t num_experts = 8;
  int64_t num_experts_per_tok = 2;     // top-k
  int64_t moe_intermediate_size = 0;   // each expert's hidden size; 0: ffn_hidden / top-k
  bool norm_topk_prob = false;
  double router_aux_loss_coef = 0.001;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // Fine-tuning: start from the weights (and the tokenizer) of an fsdpp checkpoint of any layout
  // or a Hugging Face model directory, whose shape then replaces the keys above; a new run
  // (step 1, fresh optimizer, schedule and data position), unlike a resume.
  std::string init_from;
  // exact: the model is made without storage, sharded, and each rank draws its shards' rows of
  // the whole model's values (bit for bit those of `off`), or reads them (init_from, a resume);
  // per_shard: the same, the values counter-based per parameter and element (not those of one
  // process); off: every rank builds the whole model in fp32 first, then shards it.
  config::Choice<DeferredInit> deferred_init = DeferredInit::EXACT;
};

// `data:`
// One dataset of data.mixture and how often batches draw from it.
struct MixtureSource {
  std::string path;     // as data.path: text, JSON Lines, Parquet, Arrow, a prepared directory
  double weight = 1.0;  // > 0; the rows are drawn in proportion to the weights
  bool operator==(const MixtureSource&) const = default;
};

struct DataSection {
  // What to train on (docs/your-data.md): a text file, or a directory whose regular files (not
  // symlinks, not named *.dat or *.u8) are concatenated in name order (resolve_data_files); or
  // records of documents: JSON Lines / JSON (also .gz, .zst), Parquet, Arrow, a `datasets`
  // save_to_disk directory, a directory or glob of such shards, a directory `fsdpp-data prepare`
  // wrote.
  std::string path;
  // Instead of path: several datasets, each drawn in proportion to its weight.
  std::vector<MixtureSource> mixture;
  // byte | sentencepiece (trained here on data.path, or data.tokenizer_model) | a Hugging Face
  // tokenizer.json, a directory holding one, or a SentencePiece .model file. A model.init_from
  // source's own tokenizer replaces it (and must then be the one named, if one is).
  std::string tokenizer = "byte";
  std::string tokenizer_model;  // sentencepiece .model file; empty: train one on the data
  int64_t tokenizer_vocab_size = 512;  // the vocabulary of a sentencepiece model trained here
  int64_t seq_len = 128;               // tokens per training row, <= model.max_seq_len
  double val_fraction = 0.05;          // the last fraction of tokens (documents) is validation
  double train_fraction = 1.0;         // the first fraction of the rest is the training split
  std::string cache_dir;               // empty: <training.output_dir>/cache
  // Records (TRL's SFT keys): the text field of language-modeling records; a loss on the
  // completion of prompt/completion records only; on the assistant turns of messages only.
  std::string dataset_text_field = "text";
  bool completion_only_loss = true;
  bool assistant_only_loss = false;
  // Records into rows of seq_len: packed several to a row (TRL's packing, best-fit decreasing
  // or wrapped), documents longer than seq_len split or truncated. padding_free: each document
  // attended to alone (document masking); unset, TRL's rule: on for bfd packing, else off.
  bool packing = false;
  config::Choice<data::PackingStrategy> packing_strategy = data::PackingStrategy::BFD;
  std::optional<bool> padding_free;
  config::Choice<data::LongDocuments> long_documents = data::LongDocuments::SPLIT;

  bool tokenizer_is(std::string_view kind) const { return tokenizer == kind; }
  // padding_free as it applies: unset, on for bfd packing (TRL's SFTTrainer: padding_free or
  // packing with the bfd strategy), else off.
  bool document_masking() const {
    return padding_free.value_or(packing && packing_strategy == data::PackingStrategy::BFD);
  }
};

// `training.fsdp_config:` (keys spelled with Hugging Face's `fsdp_` prefix, which is optional).
struct FsdpSection {
  config::Choice<AutoWrapPolicy> auto_wrap_policy = AutoWrapPolicy::TRANSFORMER_BASED_WRAP;
  std::vector<std::string> transformer_layer_cls_to_wrap = {"TransformerBlock"};
  int64_t min_num_params = 100000000;  // SIZE_BASED_WRAP: a unit per subtree of this many params
  // YAML null is NO_PREFETCH (Hugging Face's None).
  config::Choice<BackwardPrefetch> backward_prefetch = BackwardPrefetch::BACKWARD_PRE;
  bool forward_prefetch = false;
  // Broadcast rank 0's parameters and buffers to every rank before sharding
  // (FullyShardOptions::sync_module_states): fsdpp's ranks already start from the same weights
  // (training.seed), so this is a check that costs one broadcast per tensor at startup.
  bool sync_module_states = false;
  // At most two prefetched all-gathers in flight (false: as many as the prefetch asks for).
  bool limit_all_gathers = true;
  // The root and the last unit made (the last transformer block) keep their parameters from
  // forward to backward, which then gathers neither (set_reshard_after_forward(false) on them,
  // torchtitan's layout). Not with pipeline or expert parallelism.
  bool keep_ends_gathered = false;
  // Gradient elements per reduce-scatter bucket, issued as soon as computed
  // (FullyShardOptions::reduce_bucket_size); 0: one reduction per unit.
  int64_t reduce_bucket_size = 0;
  config::Choice<state::StateDictType> state_dict_type = state::StateDictType::SHARDED;
  bool offload_params = false;
  // Disk offload of the optimizer state (DiskOffloadedOptimizer): a directory for the per-rank
  // memory-mapped state files; empty: the state stays in memory.
  std::string offload_optimizer_state_dir;
  // hybrid_shard*: ranks per shard group (the mesh is world/this x this); 0: LOCAL_WORLD_SIZE,
  // i.e. shard inside a node and replicate across nodes.
  int64_t hybrid_shard_group_size = 0;
};

// `training:` (keys named as Hugging Face's TrainingArguments).
struct TrainingSection {
  ShardingStrategy fsdp = ShardingStrategy::FULL_SHARD;
  FsdpSection fsdp_config;
  bool gradient_checkpointing = false;  // of the transformer blocks
  int64_t gradient_checkpointing_every = 1;  // every k-th block (1: all of them)
  // full: a checkpointed block keeps only its input; selective: also its projections' products
  // (torchtitan's selective "op" mode for matmuls), recomputing norms, RoPE, attention and
  // activations only.
  config::Choice<CheckpointingMode> gradient_checkpointing_mode = CheckpointingMode::FULL;
  bool bf16 = false;  // bf16 compute and all-gathers, float32 master weights and reductions
  bool fp16 = false;  // the same in float16, with the sharded dynamic loss scaler
  // Float8 GEMMs for the decoders' projections (docs/float8.md): off, tensorwise or rowwise;
  // fp8_filter: torchao's auto filter of the GEMMs worth it, or every one whose dims allow.
  config::Choice<Float8Recipe> fp8 = Float8Recipe::OFF;
  config::Choice<Float8Filter> fp8_filter = Float8Filter::AUTO;
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  // Hugging Face's names for the training batches' loader (data::BatchLoader): 0 makes each
  // batch on the training thread when it is needed; N > 0 background threads make them ahead,
  // up to dataloader_prefetch_factor per thread, the same batches in the same order.
  int64_t dataloader_num_workers = 0;
  int64_t dataloader_prefetch_factor = 2;
  // Pinned (page-locked) host memory for the batches when the ranks use CUDA, so that copies to
  // the GPU can be asynchronous; on CPU it has no effect (said once in the log).
  bool dataloader_pin_memory = false;
  double learning_rate = 3e-4;
  int64_t warmup_steps = 0;
  // Hugging Face's warmup_ratio: warmup over ceil(ratio x the run's steps); warmup_steps > 0 wins.
  double warmup_ratio = 0.0;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0: no clipping
  int64_t max_steps = -1;      // -1: train for num_train_epochs
  double num_train_epochs = 0;  // used when max_steps < 0
  int64_t logging_steps = 10;
  int64_t eval_steps = 0;  // 0: evaluate only at the end
  int64_t eval_max_batches = 20;
  // Hugging Face's names. steps: every save_steps (0: none on the way); epoch: at the end of each
  // pass over the data; no: never. Unless no, the run also saves its last step when it ends.
  config::Choice<SaveStrategy> save_strategy = SaveStrategy::STEPS;
  int64_t save_steps = 0;        // with save_strategy steps: <output_dir>/checkpoint-<step>
  bool save_only_model = false;  // checkpoints without optimizer state (smaller; resumes warn)
  int64_t save_total_limit = 0;  // 0: keep every checkpoint
  // Checkpoints written by a background thread from a copy of the state while training goes on
  // (docs/training.md#asynchronous-saves).
  bool async_save = false;
  // "" : start fresh; "latest": the newest complete checkpoint-<step> in output_dir (fresh when
  // there is none); else a checkpoint directory.
  std::string resume_from_checkpoint;
  uint64_t seed = 42;
  std::string output_dir = "runs/default";
  // Write into an output_dir that another live job holds (Hugging Face's name); by default the
  // second job is refused (docs/faults.md).
  bool overwrite_output_dir = false;
  // Skip the check, before the model is allocated, that the estimated memory per rank fits.
  bool skip_memory_check = false;
  // Train on the CPU although CUDA devices are visible (Hugging Face's use_cpu, and no_cuda, its
  // older name); otherwise each rank computes on its LOCAL_RANK-th GPU when there are GPUs.
  bool use_cpu = false;
  bool no_cuda = false;
  bool on_cpu() const { return use_cpu || no_cuda; }
  // The optimizer (Hugging Face's names): adamw_torch, LibTorch's AdamW; adamw_torch_fused, one
  // fused kernel over all of a device's parameters (at::_fused_adamw_), the same update; empty:
  // fused on a GPU, adamw_torch on the CPU.
  std::string optim;
  // Where the run's metrics go besides metrics.jsonl (Hugging Face's names): "tensorboard"
  // writes TensorBoard event files into logging_dir (docs/observability.md); "all" is every
  // integration fsdpp has (tensorboard); "none" or an empty list: none.
  std::vector<std::string> report_to = {"tensorboard"};
  std::string logging_dir;  // empty: <output_dir>/runs
  // Whether report_to names tensorboard (or all).
  bool report_to_tensorboard() const;
  config::Choice<LrSchedulerType> lr_scheduler_type = LrSchedulerType::COSINE;
  double min_lr_ratio = 0.1;                 // the schedule decays to learning_rate * this
  int64_t sample_tokens = 200;               // text sampled after training; 0: none
  std::string sample_prompt = "\n";
  double sample_temperature = 0.8;  // 0: greedy
  int64_t sample_top_k = 0;         // 0: the whole vocabulary
  // glibc's mmap threshold for the trainer's process, in bytes (mallopt M_MMAP_THRESHOLD): FSDP's
  // per-step buffers then go back to the system when freed instead of staying in the heap.
  // Less peak RSS for some step time (page faults); 0: glibc's dynamic threshold
  // (docs/fully-shard.md#memory).
  int64_t malloc_mmap_threshold = 1 << 20;
  // Steps whose timeline each rank writes as a Chrome trace (Perfetto, chrome://tracing) to
  // <output_dir>/traces/rank<R>.trace.json; fsdpp's key (docs/observability.md#timeline-traces).
  std::vector<int64_t> profile_steps;
};

// parallelism: how the ranks split the work beyond FSDP, with torchtitan's names
// (docs/tensor-parallel.md#fsdpp-train); train/parallel_dims.h resolves them on a world.
struct ParallelismSection {
  int64_t data_parallel_replicate_degree = 1;  // > 1: HSDP's replicas (training.fsdp hybrid_*)
  int64_t data_parallel_shard_degree = -1;     // -1: the ranks the other degrees leave
  int64_t tensor_parallel_degree = 1;          // the Llama plan over groups of this many ranks
  bool enable_sequence_parallel = false;       // norms and residuals split along the sequence
  int64_t expert_parallel_degree = 1;          // qwen3_moe: experts split over groups of this many
  // Pipeline parallelism (docs/pipeline.md#fsdpp-train): the Llama cut into stages over groups
  // of this many ranks (the outermost mesh dim), each stage FSDP over the dp ranks.
  int64_t pipeline_parallel_degree = 1;
  // pipeline/schedule_traits.h's names, read in any case ("Schedule" prefix, '-', '_' ignored).
  config::Choice<PipelineScheduleName> pipeline_parallel_schedule = "1F1B";
  // Sequences per microbatch: a step's per_device_train_batch_size x gradient_accumulation_steps
  // sequences on each dp rank go through the pipeline as that many / this microbatches.
  int64_t pipeline_parallel_microbatch_size = 1;
  // Units (embedding, blocks, head) per stage; 0: one stage per rank (two for the interleaved
  // and V schedules), the units split as evenly as can be.
  int64_t pipeline_parallel_layers_per_stage = 0;
};

struct TrainConfig {
  ModelSection model;
  DataSection data;
  TrainingSection training;
  ParallelismSection parallelism;
  // `distillation:` knowledge distillation from a frozen teacher (fsdpp/distill/distillation.h).
  distill::DistillationSection distillation;

  // Parses YAML text (a file's contents), applies `overrides` in order ("training.fsdp=no_shard",
  // "training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[A, B]"; the value is read as a
  // YAML scalar or sequence), then validates. `source_name` names the text in error messages.
  static TrainConfig from_yaml_string(const std::string& yaml,
                                      const std::vector<std::string>& overrides = {},
                                      const std::string& source_name = "<string>");
  // The same for a file; errors name its path.
  static TrainConfig from_file(const std::string& path,
                               const std::vector<std::string>& overrides = {});

  // Ranges and cross-field checks of every section: validate_run's, then fsdpp-train's model:
  // and data: sections and validate_layout's, unless model.init_from is set (below). Does not
  // look at the file system.
  void validate() const;
  // fsdpp-train's model's shape against the parallel degrees: a Llama's heads over
  // tensor_parallel_degree, experts for expert_parallel_degree, no tied table under a pipeline.
  // With model.init_from the directory decides the architecture and the shape, which the
  // trainer reads when the run starts: validate() leaves these checks to it then.
  void validate_layout() const;
  // The checks of the keys any run reads, whatever model it trains: training: (fsdp_config
  // included), parallelism:'s degrees and schedule, distillation:. train() (custom_model.h)
  // validates its config with these alone: its model's shape is its plan's to check.
  void validate_run() const;

  // The effective configuration, every key included; from_yaml_string reads it back to an
  // equal config.
  std::string to_yaml() const;

  // Keys set to something else than their default that nothing reads in this configuration:
  // the distillation: section's without distillation.teacher ("distillation.kd_ratio=0.9").
  // fsdpp-train warns naming them.
  std::vector<std::string> unused_keys() const;
  // The keys of `section` ("model", "data", ...) set to something else than their default, as
  // "model.dim=99999999", in the section's order.
  std::vector<std::string> keys_set_in(const std::string& section) const;

  // The model section as a LlamaConfig with seed = training.seed. `tokenizer_vocab_size` is the
  // tokenizer's vocabulary: the model uses it when model.vocab_size is 0, else model.vocab_size,
  // which must then be at least as large. Validated.
  models::LlamaConfig llama_config(int64_t tokenizer_vocab_size) const;
  // The same for model.architecture=qwen3_moe: the dense keys as its Hugging Face names,
  // the MoE keys as they are. Validated.
  models::Qwen3MoeConfig qwen3_moe_config(int64_t tokenizer_vocab_size) const;

  // What the trainer, its checkpointer, its memory check and fsdpp-estimate run with, derived
  // here once from the keys above.

  // fully_shard's options for every unit, sharding over `mesh` (see hybrid_shard_group_size):
  // training.fsdp, bf16/fp16 compute with float32 reductions, offload and prefetch.
  FullyShardOptions fully_shard_options(std::shared_ptr<dist::DeviceMesh> mesh) const;
  // The units fsdp_auto_wrap_policy chooses (empty for NO_WRAP: the root alone).
  WrapPolicy wrap_policy() const;
  // How checkpoints are written (fsdp_state_dict_type); the caller adds buffers to skip and
  // extra files.
  state::SaveOptions state_dict_options() const;
  // Ranks per shard group of the hybrid strategies: fsdp_hybrid_shard_group_size, or
  // `local_world_size` (one group per node) when that is 0.
  int hybrid_shard_group_size(int local_world_size) const;
  // What the distiller and its teacher take of the run besides distillation: (the student's
  // vocabulary `student_vocab`, data.seq_len, training.seed, model.init_from and deferred_init,
  // fsdp_config.limit_all_gathers).
  distill::RunParts distill_run(int64_t student_vocab) const;
  // The estimator's options for this config, its degrees as the keys give them on one rank
  // (fsdpp-estimate's, whose flags then name the world; HYBRID's shard group the one given, else
  // the estimate's default); units as TRANSFORMER_BASED_WRAP makes them, whatever
  // fsdp_auto_wrap_policy says.
  EstimateOptions estimate_options() const;
  // ... on a run's resolved degrees (train::parallel_dims, fsdpp-train's memory check): the
  // estimate plays exactly `dims` (estimate_parallel_dims gives them back).
  EstimateOptions estimate_options(const parallel::ParallelDims& dims) const;
};

// The text files data.path names, in the order they are concatenated: the path itself when it is
// a file, or the regular files directly inside the directory, sorted by name, skipping symlinks
// and names ending in .dat or .u8 (fortune's index files and links).
// Throws ConfigError naming data.path when it does not exist or holds no such file.
std::vector<std::string> resolve_data_files(const std::string& path);

}  // namespace fsdpp::train
