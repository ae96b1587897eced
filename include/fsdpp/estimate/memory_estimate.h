#pragma once
// How much memory one rank needs for a training step, before running it.
//
//   fsdpp::DecoderShape shape{.vocab_size = 256, .dim = 384, .n_layers = 7, .n_heads = 6,
//                             .n_kv_heads = 2, .ffn_hidden = 1024};
//   fsdpp::EstimateOptions o;
//   o.strategy = fsdpp::ShardingStrategy::FULL_SHARD;
//   o.world_size = 4;
//   o.batch = 4;  o.seq_len = 128;                     // per rank
//   auto e = fsdpp::estimate_memory(fsdpp::describe_decoder(shape), o);
//   // e.total: bytes per rank at the step's peak; e.parameters, e.gradients, ... at that moment
//
// The estimate walks through one steady-state training step (forward, backward, optimizer step)
// in the order fsdpp executes it and keeps a ledger of every tensor the step allocates and frees:
// parameter shards, gathered (unsharded) units and their all-gather buffers, unsharded gradients
// and reduce-scatter buffers, the tensors autograd saves in each layer (derived from the model's
// shape, op by op; docs/estimate.md lists them) and the gradients flowing back, the optimizer's
// state and temporaries. The peak of the ledger, plus the runtime's own memory (LibTorch, Gloo,
// the process), is the estimate. It is checked against measured peak RSS (tests/bench/) and
// against the ZeRO paper's model-state formulas (zero_model_states).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/parallel/parallel_dims.h"

namespace fsdpp {

// Element types the estimate knows; FP32 is LibTorch's default.
enum class EstimateDType { FP32, BF16, FP16 };
int64_t dtype_bytes(EstimateDType t);
const char* to_string(EstimateDType t);
EstimateDType parse_estimate_dtype(const std::string& name);  // "fp32"/"float32", "bf16", "fp16"

// The sparse layers of a Qwen3-MoE decoder (fsdpp::models::Qwen3MoeConfig's MoE fields): E
// experts of SwiGLU width moe_intermediate, each token sent to top_k of them; the dense layers
// (mlp_only_layers, decoder_sparse_step) keep a SwiGLU of DecoderShape::ffn_hidden.
struct MoeShape {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t moe_intermediate = 0;
  std::vector<bool> sparse;  // per layer: true where the MLP is the experts
  // The forward returns the router logits and computes the load-balancing loss (fsdpp-train
  // does whenever router_aux_loss_coef > 0).
  bool router_logits = true;
  int64_t num_sparse() const;
};

// The shape of a Llama-style decoder (fsdpp::models::LlamaConfig's shape fields, resolved:
// n_kv_heads and ffn_hidden are the actual sizes, never 0), or of a Qwen3-MoE one (moe set).
struct DecoderShape {
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden = 0;
  bool tie_embeddings = false;
  int64_t max_seq_len = 0;  // rows of the rotary tables (buffers); 0: the run's seq_len
  // Qwen3 (qwen3_moe): head_dim apart from dim / n_heads, an RMSNorm on every q and k head,
  // rotary tables made per forward (no buffers), and the MoE layers.
  int64_t head_size = 0;  // 0: dim / n_heads
  bool qk_norm = false;
  std::optional<MoeShape> moe;
  int64_t head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }
  const char* architecture() const { return moe ? "Qwen3-MoE" : "Llama"; }
  void validate() const;  // ConfigError "[estimate] ..." for sizes that make no model
};

// A model as FSDP sees it: its units in forward order (the root first), each a list of
// parameters given as (rows along dim 0, elements per row), since every parameter is padded to a
// multiple of the shard world along dim 0. `shape` is what activations are derived from; a
// model described by its parameter count alone has none, and its activations are not estimated.
struct ModelDescription {
  struct Param {
    int64_t rows = 1;
    int64_t row_numel = 1;
    int64_t numel() const { return rows * row_numel; }
  };
  struct Unit {
    std::string name;
    std::vector<Param> params;
    // Expert parallelism: a sparse layer's experts, this rank's E / ep of them, a unit of their
    // own that FSDP shards over the ranks holding the same experts (world / ep), not the world.
    bool experts = false;
    int64_t numel() const;
  };
  std::vector<Unit> units;  // units[0] is the root
  std::optional<DecoderShape> shape;
  int64_t num_params() const;
};

// The root holds tok_embeddings, norm and output (unless tied); every TransformerBlock is a unit
// (the trainer's default TRANSFORMER_BASED_WRAP). With shape.moe, Qwen3-MoE's: every
// Qwen3MoeDecoderLayer a unit (attention with q_norm and k_norm, the router and the stacked
// experts (E, I, C) x 3 on sparse layers, a dense SwiGLU on the others).
ModelDescription describe_decoder(const DecoderShape& shape);

// Parameters in all and those one token's forward uses: every expert against top_k of them.
struct ParameterCounts {
  int64_t total = 0;
  int64_t active = 0;  // per token: the dense parts, the routers and top_k experts per sparse layer
  int64_t experts = 0; // of total: the experts' weights
};
ParameterCounts count_parameters(const ModelDescription& model);

// Expert parallelism over `degree` ranks: each sparse layer's experts split off into a unit of
// their own (ModelDescription::Unit::experts) holding E / degree of them, after its layer.
// ConfigError when the model has no experts or E is not divisible by the degree.
// `apart`: the experts a unit of their own even at degree 1 (whole experts under tensor
// parallelism, which parallelize places on the sparse mesh).
ModelDescription expert_parallel_slice(const ModelDescription& model, int degree, bool apart = false);
// `num_params` split into `n_units` equal units (the root holding the remainder), each one flat
// parameter: model states and units in flight, no activations.
ModelDescription describe_parameter_count(int64_t num_params, int64_t n_units);
// What one rank of a tensor-parallel group of `degree` holds under the Llama plan
// (docs/tensor-parallel.md): wq, wk, wv, w1, w3 and the output layer split along their rows
// (output features), wo and w2 along their columns, the embedding along the vocabulary, norms
// whole. Sizes that do not divide are the largest rank's share (tp::shard_range gives the
// first size % degree ranks one more). A model given as a parameter count has every parameter
// divided (rounded up). ConfigError for heads the plan cannot split. A Qwen3-MoE under its plan
// (models/qwen3_moe_tp_plan.h): attention as the Llama's (q_norm, k_norm whole), dense MLPs
// column / row-wise, the router whole, the experts split along their width (split_experts: gate
// and up (E, I / degree, C), down (E, C, I / degree)) or kept whole.
ModelDescription tensor_parallel_slice(const ModelDescription& model, int degree, bool split_experts = true);
// What one rank holds before FSDP under parallel::parallelize's layout: tensor_parallel_slice over
// tp, then the experts units of their own (sliced by ep) where parallelize puts them on the
// sparse mesh: with ep > 1, or kept whole under tp > 1. ConfigError for ep > 1 with split experts
// (parallelize refuses it too).
ModelDescription rank_slice(const ModelDescription& model, int tp, int ep, bool split_experts);

enum class EstimateOptimizer { ADAMW, ADAM, SGD, SGD_MOMENTUM };
EstimateOptimizer parse_estimate_optimizer(const std::string& name);  // adamw, adam, sgd, sgd_momentum

// What `fsdpp-bench baseline` measured on the development machine (2 CPUs, torch 2.11 wheel,
// Gloo, 1 to 4 ranks): the peak RSS of a process that loaded LibTorch, joined a Gloo group and
// ran two training steps of a tiny model. Override it with what your machine measures.
inline constexpr int64_t kDefaultRuntimeBaselineBytes = 362ll << 20;

struct EstimateOptions {
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  int world_size = 1;  // all ranks: tensor_parallel x the data-parallel ranks FSDP spans
  // Tensor parallelism (the Llama plan over groups of this many ranks): each rank holds
  // tensor_parallel_slice of the model, and FSDP shards that over world_size / tensor_parallel
  // ranks. Every rank of a tp group computes the same batch; the heads, the FFN width and the
  // vocabulary are split, the residual stream is whole, or split along the sequence with
  // sequence_parallel.
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  // Expert parallelism (a model with experts): each sparse layer's experts split over groups of
  // this many ranks (expert_parallel_slice) and sharded by FSDP over world_size / expert_parallel
  // ranks (efsdp), the rest of the model over the world; every rank computes its own batch, and
  // each sparse layer sends its tokens' top-k copies to the experts' ranks and back (all-to-all).
  int expert_parallel = 1;
  // Under tensor parallelism, experts split over tp (true) or kept whole, each tp rank routing its
  // own chunk of the tokens (false); unset: as parallelize decides (split without expert
  // parallelism, whole with it: parallel::ParallelizeOptions::split_experts).
  std::optional<bool> split_experts;
  // Pipeline parallelism (a Llama; docs/estimate.md#pipeline-parallelism): the model cut into
  // `degree` stages (stages_per_rank per rank for the interleaved schedules) by units, the
  // embedding and the head counting as units (fsdpp/models/llama_stages.h), each stage sharded
  // by FSDP over world_size / degree ranks, parameters gathered for the whole step and gradients
  // reduced once at its end. `batch` is a data-parallel rank's sequences per step, cut into
  // `microbatches` equal microbatches; how many of them each stage holds activations for is read
  // off the schedule's action lists (fsdpp/pipeline/schedules.h). The estimate is the most loaded
  // stage's (or `stage`'s), MemoryEstimate::stages has every stage.
  struct Pipeline {
    int degree = 1;
    int microbatches = 1;
    std::string schedule = "1F1B";  // a name make_schedule knows: GPipe, 1F1B, Interleaved1F1B, ZBH1, ...
    int layers_per_stage = 0;       // units per stage (torchtitan's key); 0: as even as can be
    int stages_per_rank = 0;        // interleaved schedules (0: 2; ZBVZeroBubble: 2)
    int stage = -1;                 // report this stage; -1: the one with the highest total
  } pipeline;
  // HYBRID_SHARD / HYBRID_SHARD_ZERO2: ranks per shard group (0: parallel::default_shard_group
  // of the data-parallel ranks, a stage's under a pipeline: a node's dp ranks, ranks_per_node /
  // tensor_parallel, at most all of them). fsdpp-train gives its resolved dp_shard here.
  int shard_group_size = 0;
  int ranks_per_node = 0;  // a node's ranks, for that default (0: parallel::kDefaultRanksPerNode)
  // HYBRID's replicas when the run names them (parallelism.data_parallel_replicate_degree) and
  // not the group: the shard group is the data-parallel ranks over them (which they must divide).
  int replicas = 0;
  // Mixed precision: parameters gathered and computed in param_dtype, gradients reduced in
  // reduce_dtype, an fp32 master copy in the shards the optimizer updates.
  EstimateDType param_dtype = EstimateDType::FP32;
  EstimateDType reduce_dtype = EstimateDType::FP32;
  bool activation_checkpointing = false;  // every TransformerBlock re-computed in backward
  // Parameter shards, gradient shards and optimizer state on the host; on a CPU device this
  // moves nothing (see EstimateOptions::device_is_gpu).
  bool cpu_offload = false;
  bool device_is_gpu = false;
  int64_t batch = 1;    // sequences per data-parallel rank per micro-step
  int64_t seq_len = 1;
  // Prefetch, as fully_shard's options say (FullyShardOptions' defaults): all-gathers issued for
  // the next units while this one computes; each holds its (shard_world x shard) buffer until
  // the unit runs and copies its parameters out. Bounded by limit_all_gathers (0: no bound).
  int forward_prefetch = 0;
  int backward_prefetch = 1;            // 0: NO_PREFETCH; else BACKWARD_PRE/POST with this depth
  bool backward_prefetch_post = false;  // BACKWARD_POST: issued after the unit's backward
  int limit_all_gathers = 2;
  EstimateOptimizer optimizer = EstimateOptimizer::ADAMW;
  // The optimizer's state in memory-mapped files (fsdpp/optim/disk_offload.h, fsdpp-train's
  // fsdp_offload_optimizer_state_dir): a step updates one parameter at a time, its state mapped
  // in for the update and dropped after it; none of it persists in the process.
  bool optimizer_state_on_disk = false;
  // The logits stay referenced until the optimizer step (fsdpp-train and the bench keep the
  // forward's output while they call backward and step).
  bool keep_logits = true;
  int64_t runtime_baseline_bytes = kDefaultRuntimeBaselineBytes;
  // Deferred initialisation (fsdpp/fsdp/deferred_init.h, fsdpp-train's model.deferred_init): the
  // model made without storage, each rank allocating its shards and drawing (or reading) them in
  // chunks of init_chunk_bytes. false: every rank builds the whole model in fp32 before
  // fully_shard shards it (a model built whole: deferred_init off, or a user's) and that peak,
  // "building the model", often exceeds the step's.
  bool deferred_init = true;
  int64_t init_chunk_bytes = int64_t{64} << 20;
  // CPU runs: glibc malloc's mmap threshold. 0: glibc's default, which starts at 128 KiB and
  // rises to the size of each mapping freed (heap fragmentation then adds to RSS, and the
  // estimate of it is a lower bound). > 0: fixed, as MALLOC_MMAP_THRESHOLD_=<bytes> (or
  // GLIBC_TUNABLES=glibc.malloc.mmap_threshold=<bytes>) sets it: every tensor at least that big
  // gets its own mapping, returned when freed, and RSS follows the live tensors.
  int64_t mmap_threshold = 0;
  // Knowledge distillation (docs/estimate.md#distillation-teacher): a frozen teacher of its own
  // shape, FULL_SHARD over the whole world (every rank, whatever tp and pp) in units of its own,
  // parameters in `dtype`; it costs its shards, one gathered unit at a time (plus the prefetched
  // one) during its forward under no-grad (no saved activations, no gradients, no optimizer
  // state), and its logits (B x T x V, fp32) from its forward until the student's loss is made,
  // whose graph keeps the teacher's probabilities until backward. Under tensor parallelism the
  // teacher runs whole and the objective takes this rank's vocabulary columns; under a pipeline
  // it runs on the step's rows before the pipeline, on every rank, and the last stage's ranks
  // hold its logits through the step.
  struct Teacher {
    ModelDescription model;
    EstimateDType dtype = EstimateDType::FP32;
    // What its gathered parameters, forward and logits use (unset: `dtype`, as on a GPU).
    // fsdpp-train's teacher on the CPU gathers and computes in float32 whatever its storage
    // (oneDNN's bf16 kernels cache a primitive per shape: docs/distillation.md#the-teacher).
    std::optional<EstimateDType> compute;
  };
  std::optional<Teacher> teacher;
};

// The strategy, mixed precision, offload and prefetch fields as fully_shard runs with `fsdp`
// (its mesh is not looked at); the rest keep their defaults. ConfigError for a mixed-precision
// dtype the estimate does not know (float32, bfloat16 and float16 it does).
EstimateOptions estimate_options_of(const FullyShardOptions& fsdp);

// Bytes per rank at the step's peak (the moment the ledger is highest), by what holds them.
struct MemoryEstimate {
  int64_t parameters = 0;        // parameter shards (or replicas under NO_SHARD), master copy
                                 // included, and the model's buffers (rotary tables)
  int64_t gradients = 0;         // unsharded gradients, reduce-scatter buffers, gradient shards
  int64_t optimizer_state = 0;   // e.g. AdamW's exp_avg and exp_avg_sq, plus step temporaries
  int64_t unsharded = 0;         // gathered units in flight and their all-gather buffers
  int64_t activations = 0;       // saved tensors, gradients flowing back, logits, inputs
  int64_t teacher = 0;           // distillation: the teacher's shards, gathered units, forward
                                 // tensors, logits and probabilities
  int64_t tensors = 0;           // the sum of the six above: live tensor bytes at the peak
  // CPU only: what glibc's heap keeps resident beyond the live tensors at its own high water
  // (freed chunks that the next step's allocations cannot reuse); see docs/estimate.md.
  int64_t allocator = 0;
  int64_t runtime = 0;           // LibTorch, Gloo, the process (runtime_baseline_bytes)
  int64_t total = 0;             // tensors + allocator + runtime, on the device (all of it on a CPU)
  int64_t host = 0;              // with cpu_offload on a GPU: shards and optimizer state on the host
  std::string peak_at;           // where in the step the peak is, e.g. "backward of layers.6 (feed_forward)"
  // Persistent model state per rank (ZeRO's accounting, no padding, no temporaries).
  int64_t model_states = 0;
  // What the rank holds between steps, exactly as FSDP lays it out (padded shards of this rank's
  // slices and stages): its parameters (the fp32 shards the optimizer steps), their gradients
  // after the step's reduce (fp32 shards; reduce_dtype replicas under NO_SHARD) and the
  // optimizer's state tensors. The buffers (rotary tables) are not in `parameters` here.
  struct Held {
    int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  } held;
  int shard_world = 1;           // ranks FSDP shards each (TP-local) parameter over
  int expert_shard_world = 1;    // ranks FSDP shards each expert unit over (efsdp = dp_shard x tp / ep)
  // Pipeline parallelism: the stage reported above and every stage's own estimate (its total,
  // where its peak is, the microbatches whose activations it holds at most).
  struct Stage {
    int stage = 0;
    int rank = 0;                  // pp rank holding it
    std::vector<std::string> units;
    int64_t total = 0;
    int64_t tensors = 0;
    int in_flight = 0;             // microbatches forwarded and not yet backwarded (B or I), at most
    int held_weight_grads = 0;     // zero-bubble: microbatches whose W (weight gradient) waits, at most
    std::string peak_at;
  };
  int pipeline_stage = -1;
  std::vector<Stage> stages;
  std::vector<std::string> notes;  // assumptions the numbers rest on
};

// Throws ConfigError ("[estimate] ...") for options that make no run (world size that does not
// split into shard groups, batch < 1, ...).
MemoryEstimate estimate_memory(const ModelDescription& model, const EstimateOptions& options);

// The degrees an estimate plays, resolved once for every estimate, the planner's step times and
// its layouts' keys: the mesh parallelize builds, pp outermost, then (dp_replicate x) dp_shard x
// tp, the experts' FSDP over efsdp = dp_shard x tp / ep. A HYBRID strategy shards over groups of
// shard_group_size ranks, or parallel::default_shard_group's; under a pipeline a given size is
// at most a stage's data-parallel ranks too (as fsdpp-train's parallel_dims takes a node's),
// without one a size that does not divide them is refused. fsdpp-train's own dims come back as
// they are: TrainConfig::estimate_options(dims) gives them as world_size, tensor_parallel,
// pipeline.degree, expert_parallel and shard_group_size. ConfigError ("[estimate] ...").
parallel::ParallelDims estimate_parallel_dims(const EstimateOptions& options);
// HYBRID's ranks per shard group as estimate_parallel_dims takes them (a layout's name, the planner's
// step time and keys); ConfigError, as fsdpp-train's, for replicas that do not split the dp ranks.
int estimate_shard_group(const EstimateOptions& options);

// The ZeRO paper's model-state memory per rank for Adam in mixed precision (Rajbhandari et al.
// 2020, section 5.1 and Figure 1): 2 bytes of fp16 parameters, 2 of fp16 gradients and K = 12 of
// optimizer state (fp32 master parameters, momentum, variance) per parameter Psi:
//   DDP (NO_SHARD)               (2 + 2 + K) Psi
//   ZeRO-1 (ZERO1)               (2 + 2 + K/N) Psi
//   ZeRO-2 (SHARD_GRAD_OP)       (2 + (2 + K)/N) Psi
//   ZeRO-3 (FULL_SHARD)          (2 + 2 + K) Psi / N
// e.g. 7.5B parameters on 64 GPUs: 120 GB, 31.4 GB, 16.6 GB, 1.88 GB.
struct ZeroModelStates {
  double no_shard = 0, zero1 = 0, zero2 = 0, zero3 = 0;  // bytes per rank
};
ZeroModelStates zero_model_states(double num_params, int world_size, double k = 12);

// --budget: the fastest configuration whose estimate fits, in the order NO_SHARD, SHARD_GRAD_OP,
// FULL_SHARD, FULL_SHARD + activation checkpointing, FULL_SHARD + checkpointing + CPU offload
// (the last only where offload frees device memory, i.e. on a GPU).
struct Candidate {
  std::string name;  // "NO_SHARD", "FULL_SHARD + checkpointing", ...
  EstimateOptions options;
  MemoryEstimate estimate;
  bool fits = false;
  std::string why;  // "fits: 3.1 GiB <= 4.0 GiB" or "needs 5.2 GiB > 4.0 GiB: ... largest ..."
};
struct Recommendation {
  std::vector<Candidate> candidates;  // fastest first
  int chosen = -1;                    // index into candidates, -1 when nothing fits
};
Recommendation recommend(const ModelDescription& model, const EstimateOptions& base, int64_t budget_bytes);

}  // namespace fsdpp
