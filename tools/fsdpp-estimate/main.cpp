// fsdpp-estimate: memory per rank of a training run, before running it (docs/estimate.md).
//   fsdpp-estimate configs/default.yaml training.fsdp=shard_grad_op --world-size 1,2,4
//   fsdpp-estimate --dim 4096 --n-layers 32 --n-heads 32 --vocab-size 32000 --batch 1 --seq-len 4096 \
//       --world-size 8 --mixed-precision bf16 --device cuda --budget 80
//   fsdpp-estimate --params 7.5e9 --world-size 64            (model states; the ZeRO paper's table)
//
// The run is read as fsdpp-train reads it: a config (or, without one, kNoConfig) and `key=value`
// overrides through the config engine (TrainConfig). The flags of a model's shape, the batch, the
// strategy and the parallel degrees are aliases of config keys (kAliases: each adds an override,
// so the engine parses and checks every value); the other flags are the estimate's own.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/estimate/llama_shape.h"
#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/estimate/plan_answer.h"
#include "fsdpp/estimate/step_time.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/memory_check.h"
#include "fsdpp/train/plan_overrides.h"

namespace {

using nlohmann::json;

// A flag that sets a config key: with a value (`value` null: the flag's argument) or a switch
// (`value`: what it sets). `implies` is set too, before every alias's own key. `shape`: a key of
// the model's shape (which --params replaces).
struct Alias {
  const char* flag;
  const char* key;
  const char* value;
  const char* help;
  bool shape = false;
  const char* implies = nullptr;
};

// One table: every flag that is a config key, in the order their overrides are applied.
const Alias kAliases[] = {
    {"--vocab-size", "model.vocab_size", nullptr, "Llama shape: vocabulary", true},
    {"--dim", "model.dim", nullptr, "Llama shape: model width", true},
    {"--n-layers", "model.n_layers", nullptr, "Llama shape: TransformerBlocks (with --params: units = this + 1)"},
    {"--n-heads", "model.n_heads", nullptr, "Llama shape: query heads", true},
    {"--n-kv-heads", "model.n_kv_heads", nullptr, "Llama shape: key/value heads (0: n_heads)", true},
    {"--ffn-hidden", "model.ffn_hidden", nullptr, "Llama shape: SwiGLU width (0: 2/3*4*dim rounded to --multiple-of)", true},
    {"--multiple-of", "model.multiple_of", nullptr, "Llama shape: rounding of the SwiGLU width", true},
    {"--tie-embeddings", "model.tie_embeddings", "true", "Llama shape: the output layer reuses the embedding", true},
    {"--max-seq-len", "model.max_seq_len", nullptr, "rows of the rotary tables (without a config: --seq-len)", true},
    {"--num-experts", "model.num_experts", nullptr, "qwen3_moe: experts per sparse layer (implies --architecture qwen3_moe)",
     true, "model.architecture=qwen3_moe"},
    {"--architecture", "model.architecture", nullptr, "llama or qwen3_moe", true},
    {"--head-dim", "model.head_dim", nullptr, "qwen3_moe: head_dim (0: dim / n_heads)", true},
    {"--num-experts-per-tok,--top-k", "model.num_experts_per_tok", nullptr, "qwen3_moe: experts each token is sent to", true},
    {"--moe-intermediate-size", "model.moe_intermediate_size", nullptr, "qwen3_moe: an expert's SwiGLU width (0: ffn / top-k)", true},
    {"--decoder-sparse-step", "model.decoder_sparse_step", nullptr, "qwen3_moe: layer i sparse when (i+1) % step == 0", true},
    {"--mlp-only-layers", "model.mlp_only_layers", nullptr, "qwen3_moe: layers that stay dense (0,3)", true},
    {"--build-whole", "model.deferred_init", "off",
     "every rank builds the whole model in fp32 before sharding it (default: made without storage, each rank "
     "allocating only its shards)"},
    {"--batch,-b", "training.per_device_train_batch_size", nullptr, "sequences per data-parallel rank per micro-step"},
    {"--seq-len,-t", "data.seq_len", nullptr, "tokens per sequence"},
    {"--strategy,-s", "training.fsdp", nullptr,
     "full_shard | shard_grad_op | no_shard (ddp) | zero1 | hybrid_shard (hybrid) | hybrid_shard_zero2"},
    {"--shard-group-size", "training.fsdp_config.fsdp_hybrid_shard_group_size", nullptr,
     "HYBRID: ranks per shard group (default: a node of 8's data-parallel ranks, min(N / (tp x pp), 8 / tp))"},
    {"--activation-checkpointing", "training.gradient_checkpointing", "true", "re-compute every decoder layer (TransformerBlock, Qwen3MoeDecoderLayer) in backward"},
    {"--cpu-offload", "training.fsdp_config.fsdp_offload_params", "true",
     "parameter/gradient shards and optimizer state on the host"},
    {"--backward-prefetch-post", "training.fsdp_config.fsdp_backward_prefetch", "BACKWARD_POST",
     "prefetch after each unit's backward"},
    {"--mmap-threshold", "training.malloc_mmap_threshold", nullptr,
     "CPU: glibc's mmap threshold in bytes (0: MALLOC_MMAP_THRESHOLD_ if set, else glibc's dynamic threshold)"},
    {"--tp", "parallelism.tensor_parallel_degree", nullptr,
     "tensor-parallel degree (--world-size counts all ranks, FSDP shards over world / tp)"},
    {"--sequence-parallel", "parallelism.enable_sequence_parallel", "true",
     "with --tp: norms and residuals split along the sequence"},
    {"--ep", "parallelism.expert_parallel_degree", nullptr,
     "expert-parallel degree: experts split over groups of this many ranks, sharded over world / ep"},
    {"--pp", "parallelism.pipeline_parallel_degree", nullptr, "pipeline-parallel degree (FSDP over world / pp)"},
    {"--schedule", "parallelism.pipeline_parallel_schedule", nullptr,
     "pipeline: GPipe, 1F1B (default), Interleaved1F1B, ZBH1, InterleavedZeroBubble, ZBVZeroBubble"},
    {"--layers-per-stage", "parallelism.pipeline_parallel_layers_per_stage", nullptr,
     "pipeline: units per stage, the embedding and head counting as units"},
    {"--teacher-config", "distillation.teacher", nullptr,
     "distillation: the teacher, a model directory (fsdpp checkpoint or Hugging Face) or an fsdpp-train YAML config"},
    {"--teacher-dtype", "distillation.teacher_dtype", nullptr, "distillation: the teacher's parameters, float32 or bfloat16"},
};

// Without a config file: the engine's defaults for everything the flags do not set, except what
// an estimate of a shape alone takes otherwise: one sequence of one token, glibc's own threshold.
constexpr const char* kNoConfig = R"yaml(
model: {max_seq_len: 1}
data: {path: "(none: fsdpp-estimate without a config)", seq_len: 1}
training: {per_device_train_batch_size: 1, max_steps: 1, malloc_mmap_threshold: 0}
)yaml";

// "7.5e9", "7.5B", "350M", "125k" -> a count.
int64_t parse_count(const std::string& text) {
  std::string t = text;
  double scale = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k': case 'K': scale = 1e3; break;
      case 'm': case 'M': scale = 1e6; break;
      case 'b': case 'B': case 'g': case 'G': scale = 1e9; break;
      case 't': case 'T': scale = 1e12; break;
      default: break;
    }
    if (scale != 1) t.pop_back();
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FSDPP_CHECK_AS(ConfigError, used == t.size() && used > 0 && v > 0,
                 "[estimate] --params '{}' is not a positive count; expected e.g. 7.5e9, 7.5B, 350M", text);
  // Checked before the conversion: llround of inf or of more than 2^63 is undefined (it gave
  // INT64_MIN).
  const double count = v * scale;
  FSDPP_CHECK_AS(ConfigError, std::isfinite(count) && count <= 1e18,
                 "[estimate] --params '{}' is not a count of parameters this estimate can hold; expected a "
                 "finite number up to 1e18 (1000000T), e.g. 7.5e9, 7.5B, 350M", text);
  return static_cast<int64_t>(std::llround(count));
}

std::vector<int> parse_world_sizes(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int v = 0;
    try {
      size_t used = 0;
      v = std::stoi(item, &used);
      if (used != item.size()) v = 0;
    } catch (const std::exception&) {
      v = 0;
    }
    FSDPP_CHECK_AS(ConfigError, v > 0, "[estimate] --world-size '{}': '{}' is not a positive integer; "
                   "expected e.g. 8 or 8,16,64", text, item);
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string strategy_name(fsdpp::ShardingStrategy s) { return fsdpp::to_string(s); }

struct Units {
  double scale;
  const char* name;
};

std::string fmt_bytes(int64_t b, Units u) { return fmt::format("{:.2f}", b / u.scale); }

// The aliases on the command line, each with the text it was given.
struct GivenAliases {
  std::vector<std::string> values = std::vector<std::string>(std::size(kAliases));
  std::vector<CLI::Option*> options;

  void add_to(CLI::App& app) {
    for (size_t i = 0; i < std::size(kAliases); ++i) {
      const Alias& a = kAliases[i];
      const std::string help = fmt::format("{} ({}{}{})", a.help, a.key, a.value ? "=" : "", a.value ? a.value : "");
      options.push_back(a.value ? app.add_flag(a.flag, help) : app.add_option(a.flag, values[i], help));
    }
  }
  bool given(size_t i) const { return options[i]->count() > 0; }
  // The text given for `key`'s flag, if it was.
  std::optional<std::string> value_of(std::string_view key) const {
    for (size_t i = 0; i < std::size(kAliases); ++i)
      if (kAliases[i].key == key && given(i)) return kAliases[i].value ? kAliases[i].value : values[i];
    return std::nullopt;
  }
  bool shape_given() const {
    for (size_t i = 0; i < std::size(kAliases); ++i)
      if (kAliases[i].shape && given(i)) return true;
    return false;
  }
  // key=value overrides, appended to `out`: what the given aliases imply, then their own keys.
  void overrides(std::vector<std::string>& out) const {
    for (size_t i = 0; i < std::size(kAliases); ++i)
      if (given(i) && kAliases[i].implies) out.emplace_back(kAliases[i].implies);
    for (size_t i = 0; i < std::size(kAliases); ++i)
      if (given(i)) out.push_back(fmt::format("{}={}", kAliases[i].key, kAliases[i].value ? kAliases[i].value : values[i]));
  }
};

// The estimate's own knobs, which no config key expresses (the config's prefetch keys are
// booleans, training.bf16 reduces in fp32, training.optim is AdamW's).
struct EstimateFlags {
  std::string params_text;
  std::optional<int64_t> units;
  std::string world_text, mixed, param_dtype, reduce_dtype, device = "cpu", optimizer;
  std::optional<int> forward_prefetch, backward_prefetch, limit_all_gathers, microbatches, stages_per_rank, stage;
  bool optimizer_on_disk = false, as_json = false, budget_gpu = false;
  std::optional<double> runtime_mb;
  std::string cluster;
  std::optional<int64_t> global_batch;
  double budget_gb = 0;
  CLI::Option* budget_option = nullptr;

  void add_to(CLI::App& app) {
    app.add_option("--params", params_text, "a parameter count instead of a shape (7.5e9, 7.5B, 350M)");
    app.add_option("--units", units, "with --params: FSDP units (default: --n-layers + 1, or 1, with a warning)");
    app.add_option("--world-size,-n", world_text, "ranks; several as 8,16,64 (default: one tp x ep x pp group)");
    app.add_option("--mixed-precision", mixed, "bf16 or fp16: parameters and gradient reduction in it, fp32 master");
    app.add_option("--param-dtype", param_dtype, "fp32 | bf16 | fp16 (gathered parameters, compute)");
    app.add_option("--reduce-dtype", reduce_dtype, "fp32 | bf16 | fp16 (gradient reduction)");
    app.add_option("--device", device, "cpu (everything is host memory) or cuda");
    app.add_option("--forward-prefetch", forward_prefetch, "units gathered ahead in forward (default: the config's, 0 or 1)");
    app.add_option("--backward-prefetch", backward_prefetch, "units gathered ahead in backward (default 1, BACKWARD_PRE; 0: none)");
    app.add_option("--limit-all-gathers", limit_all_gathers, "most prefetched gathers in flight (default 2; 0: no bound)");
    app.add_option("--optimizer", optimizer, "adamw (default) | adam | sgd | sgd_momentum");
    app.add_flag("--optimizer-state-on-disk", optimizer_on_disk,
                 "the optimizer state in memory-mapped files, one parameter's in memory at a time "
                 "(as training.fsdp_config.fsdp_offload_optimizer_state_dir)");
    app.add_option("--microbatches", microbatches, "pipeline: microbatches per step (default: the batch / "
                   "parallelism.pipeline_parallel_microbatch_size)");
    app.add_option("--stages-per-rank", stages_per_rank, "pipeline: stages per rank of the interleaved schedules (default 2)");
    app.add_option("--stage", stage, "pipeline: report the rank of this stage (default: the most loaded rank)");
    app.add_option("--runtime-baseline-mb", runtime_mb,
                   "the runtime's own memory per rank in MiB (default: measured by fsdpp-bench baseline)");
    budget_option = app.add_option("--budget", budget_gb,
                                   "memory per rank in GiB: recommend a layout that fits, fsdpp-plan's answer (its "
                                   "layouts ranked by step time within that memory; docs/planner.md)");
    app.add_option("--cluster", cluster, "with --budget: fsdpp-plan's cluster preset whose step time ranks the layouts "
                   "(default: h100-sxm with --device cuda, cpu without)");
    app.add_option("--global-batch", global_batch, "with --budget: sequences per step over all data-parallel ranks "
                   "(default: the config's, per-device batch x accumulation x data-parallel ranks)");
    app.add_flag("--budget-gpu", budget_gpu,
                 "the budget is this machine's first GPU's memory (cudaMemGetInfo's total); implies --device cuda");
    app.add_flag("--json", as_json, "machine-readable output");
  }

  // Over the options the config gave.
  void apply(fsdpp::EstimateOptions& o, std::vector<std::string>& notes) {
    // A budget that no rank can have is a typo, not "no budget" (before: -1 and nan were ignored).
    FSDPP_CHECK_AS(ConfigError,
                   budget_option->count() == 0 || (std::isfinite(budget_gb) && budget_gb > 0 && budget_gb <= 1e9),
                   "[estimate] --budget {}: expected the memory per rank in GiB, a number > 0 (such as 80)",
                   budget_gb);
    FSDPP_CHECK_AS(ConfigError, (cluster.empty() && !global_batch) || budget_option->count() > 0 || budget_gpu,
                   "[estimate] --cluster and --global-batch choose how --budget's answer is timed; give --budget "
                   "(or --budget-gpu) with them");
    if (!mixed.empty()) o.param_dtype = o.reduce_dtype = fsdpp::parse_estimate_dtype(mixed);
    if (!param_dtype.empty()) o.param_dtype = fsdpp::parse_estimate_dtype(param_dtype);
    if (!reduce_dtype.empty()) o.reduce_dtype = fsdpp::parse_estimate_dtype(reduce_dtype);
    if (budget_gpu) {
      // The device's memory through c10's allocator interface (cudaMemGetInfo), not a datasheet.
      FSDPP_CHECK_AS(ConfigError, fsdpp::dist::cuda_device_count() > 0,
                     "[estimate] --budget-gpu needs a visible CUDA device, and this process sees none; "
                     "give --budget GB for the GPU you plan for");
      const auto m = fsdpp::dist::device_memory(c10::Device(c10::kCUDA, 0));
      budget_gb = static_cast<double>(m.total) / (1ll << 30);
      device = "cuda";
      notes.push_back(fmt::format("budget: cuda:0's {:.2f} GiB (cudaMemGetInfo; {:.2f} GiB free now)",
                                  budget_gb, static_cast<double>(m.free) / (1ll << 30)));
    }
    FSDPP_CHECK_AS(ConfigError, device == "cpu" || device == "cuda",
                   "[estimate] --device '{}' is not known; expected cpu or cuda", device);
    o.device_is_gpu = device == "cuda";
    o.optimizer_state_on_disk = o.optimizer_state_on_disk || optimizer_on_disk;
    if (forward_prefetch) o.forward_prefetch = *forward_prefetch;
    if (backward_prefetch) o.backward_prefetch = *backward_prefetch;
    if (limit_all_gathers) o.limit_all_gathers = *limit_all_gathers;
    if (microbatches) o.pipeline.microbatches = *microbatches;
    if (stages_per_rank) o.pipeline.stages_per_rank = *stages_per_rank;
    if (stage) o.pipeline.stage = *stage;
    if (!optimizer.empty()) o.optimizer = fsdpp::parse_estimate_optimizer(optimizer);
    if (o.mmap_threshold == 0) {
      // What the run will get if it inherits this environment.
      const char* env = std::getenv("MALLOC_MMAP_THRESHOLD_");
      o.mmap_threshold = env ? std::atoll(env) : 0;
    }
  }

  // The runtime term (after the other notes).
  void apply_runtime(fsdpp::EstimateOptions& o, std::vector<std::string>& notes) const {
    if (runtime_mb) {
      o.runtime_baseline_bytes = static_cast<int64_t>(*runtime_mb * 1024 * 1024);
    } else if (o.device_is_gpu) {
      o.runtime_baseline_bytes = 0;
      notes.push_back("runtime: 0 on a GPU device (give --runtime-baseline-mb with your CUDA context's size)");
    }
  }
};

// The model the config describes, and its first line.
std::string describe_line(const fsdpp::train::TrainConfig& cfg, int64_t vocab, const fsdpp::ModelDescription& model) {
  if (cfg.model.architecture == fsdpp::train::ModelArchitecture::LLAMA) {
    const auto& s = *model.shape;
    return fmt::format("Llama {:.2f} M parameters (dim {}, {} layers, {} heads / {} kv, SwiGLU {}, vocab {}, {} head)",
                       model.num_params() / 1e6, s.dim, s.n_layers, s.n_heads, s.n_kv_heads, s.ffn_hidden,
                       s.vocab_size, s.tie_embeddings ? "tied" : "untied");
  }
  const auto qc = cfg.qwen3_moe_config(vocab);
  const auto counts = fsdpp::count_parameters(model);
  std::string dense;
  for (int64_t i = 0; i < qc.num_hidden_layers; ++i)
    if (!qc.is_sparse_layer(i)) dense += (dense.empty() ? "" : ",") + std::to_string(i);
  return fmt::format(
      "Qwen3-MoE {:.2f} M parameters, {:.2f} M active per token (experts {:.2f} M; dim {}, {} layers, {} "
      "heads / {} kv of {}, {} experts top-{} of SwiGLU {}, dense layers [{}] of SwiGLU {}, vocab {}, {} head)",
      counts.total / 1e6, counts.active / 1e6, counts.experts / 1e6, qc.hidden_size, qc.num_hidden_layers,
      qc.num_attention_heads, qc.num_key_value_heads, qc.head_dim, qc.num_experts, qc.num_experts_per_tok,
      qc.moe_intermediate_size, dense, qc.intermediate_size, qc.vocab_size, qc.tie_word_embeddings ? "tied" : "untied");
}

// --params: a count in equal units (--units, else --n-layers + 1, else one, with a warning), and its line.
std::pair<fsdpp::ModelDescription, std::string> parameter_count_model(const EstimateFlags& flags,
                                                                      const GivenAliases& aliases, int64_t n_layers,
                                                                      std::vector<std::string>& notes) {
  const int64_t p = parse_count(flags.params_text);
  const bool layers = aliases.value_of("model.n_layers").has_value();
  if (!flags.units && !layers) {
    std::fprintf(stderr,
                 "fsdpp-estimate: warning: --params without --units takes the model as one FSDP "
                 "unit, gathered whole at once: the 'unsharded units' and the peak are then the "
                 "whole model's. Give --units (a Llama of L blocks has L + 1: the blocks and the "
                 "root) or --n-layers\n");
    notes.push_back("one FSDP unit: --params without --units (the whole model gathered at once)");
  }
  const int64_t units = flags.units ? *flags.units : layers ? n_layers + 1 : 1;
  FSDPP_CHECK_AS(ConfigError, units >= 1, "[estimate] --units {}: expected >= 1", units);
  return {fsdpp::describe_parameter_count(p, units),
          fmt::format("{:.4g} parameters in {} equal unit(s); activations not estimated (no shape)",
                      static_cast<double>(p), units)};
}

// --budget's answer at one world size: fsdpp-plan's layouts of the model on a cluster whose
// devices have the budget, and its answer (plan_answer.h), so that the two tools give one answer.
// Beside it, the config's own layout strategy by strategy (fsdpp::recommend), which is also the
// answer without a shape to time (--params) or when no planned layout fits (CPU offload).
struct BudgetAnswer {
  fsdpp::Recommendation config_layout;
  std::string cluster;
  std::string layout, why, command;  // layout empty: nothing fits
};

// The cluster whose step time ranks the layouts, its devices' memory the budget (a CPU node's
// memory is its ranks' together).
fsdpp::Cluster budget_cluster(const EstimateFlags& flags, int world) {
  const bool gpu = flags.device == "cuda";
  auto c = fsdpp::cluster_preset(!flags.cluster.empty() ? flags.cluster : gpu ? "h100-sxm" : "cpu");
  FSDPP_CHECK_AS(ConfigError, c.device_is_gpu == gpu,
                 "[estimate] --cluster {} is a {} cluster but the estimate is for --device {}; expected a {} preset",
                 c.name, c.device_is_gpu ? "GPU" : "CPU", flags.device, gpu ? "GPU" : "CPU");
  const auto bytes = static_cast<int64_t>(flags.budget_gb * 1024 * 1024 * 1024);
  c.memory_bytes = gpu ? bytes : bytes * std::min(world, c.devices_per_node);
  c.memory_from = "--budget";
  return c;
}

// `args` minus the keys `overrides` sets (a layout's keys replace the config's).
std::vector<std::string> without_keys(const std::vector<std::string>& args, const std::vector<std::string>& overrides) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    const auto key = a.substr(0, a.find('='));
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const std::string& o) { return o.substr(0, o.find('=')) == key; });
    if (!replaced) out.push_back(a);
  }
  return out;
}

// A layout's fsdpp-train overrides: for a config, those that change it.
using KeysOf = std::function<std::vector<std::string>(const fsdpp::EstimateOptions&)>;

BudgetAnswer budget_answer(const fsdpp::ModelDescription& model, const fsdpp::EstimateOptions& o,
                           const EstimateFlags& flags, int64_t global_batch, const std::vector<std::string>& run,
                           const KeysOf& keys_of) {
  BudgetAnswer b;
  b.config_layout = fsdpp::recommend(model, o, static_cast<int64_t>(flags.budget_gb * 1024 * 1024 * 1024));
  if (model.shape) {
    const auto c = budget_cluster(flags, o.world_size);
    b.cluster = c.name;
    const auto plan = fsdpp::plan_layouts(model, o, c, o.world_size, global_batch);
    const auto answer = fsdpp::plan_answer(plan, c);
    if (answer.chosen >= 0) {
      const auto& e = plan.fitting[static_cast<size_t>(answer.chosen)];
      b.layout = e.layout;
      b.why = fmt::format("fsdpp-plan's answer on {} for a global batch of {} ({:.3f} s a step, {:.2f} GiB): {}",
                          c.name, global_batch, e.time.total_s, e.memory.total / 1073741824.0, answer.why);
      try {
        const auto keys = keys_of(e.options);
        b.command = fsdpp::train::layout_command(o.world_size, c.devices_per_node, run.front(),
                                                 without_keys({run.begin() + 1, run.end()}, keys), keys);
      } catch (const fsdpp::ConfigError& error) {
        b.command = fmt::format("(no fsdpp-run line: {})", error.what());
      }
      return b;
    }
  }
  if (b.config_layout.chosen >= 0) {
    b.layout = b.config_layout.candidates[static_cast<size_t>(b.config_layout.chosen)].name;
    b.why = model.shape ? "none of fsdpp-plan's layouts fits: the config's layout with the least sharding that does"
                        : "no step time without the model's shape: the config's layout with the least sharding that fits";
  }
  return b;
}

// What is printed: an estimate per world size and, with a budget, a recommendation per world size.
struct Report {
  fsdpp::ModelDescription model;
  std::string model_line;
  std::vector<std::string> notes;
  fsdpp::EstimateOptions o;
  std::vector<int> world_sizes;
  std::vector<fsdpp::MemoryEstimate> ests;
  std::vector<BudgetAnswer> recs;
  std::string optimizer, device;
  double budget_gb;
  // The ZeRO paper's parameters: under TP its data-parallel accounting applies to a rank's slice
  // over N / tp ranks.
  double psi = static_cast<double>(
      fsdpp::tensor_parallel_slice(model, o.tensor_parallel, o.split_experts.value_or(o.expert_parallel == 1))
          .num_params());
};

void print_json(const Report& rep) {
  const auto& o = rep.o;
  const auto& world_sizes = rep.world_sizes;
  const auto& ests = rep.ests;
  const auto& recs = rep.recs;
  const int tp_degree = o.tensor_parallel;
  json j;
  j["model"] = rep.model_line;
  j["num_params"] = rep.model.num_params();
  j["num_active_params"] = fsdpp::count_parameters(rep.model).active;
  j["notes"] = rep.notes;
  j["estimates"] = json::array();
  for (size_t i = 0; i < ests.size(); ++i) {
    const auto& e = ests[i];
    j["estimates"].push_back({{"world_size", world_sizes[i]}, {"strategy", strategy_name(o.strategy)},
                              {"tensor_parallel", o.tensor_parallel},
                              {"sequence_parallel", o.sequence_parallel},
                              {"expert_parallel", o.expert_parallel},
                              {"expert_shard_world", e.expert_shard_world},
                              {"teacher_bytes", e.teacher},
                              {"pipeline_parallel", o.pipeline.degree},
                              {"pipeline_stage", e.pipeline_stage},
                              {"shard_world", e.shard_world}, {"parameters_bytes", e.parameters},
                              {"gradients_bytes", e.gradients}, {"optimizer_state_bytes", e.optimizer_state},
                              {"unsharded_bytes", e.unsharded}, {"activations_bytes", e.activations},
                              {"tensors_bytes", e.tensors}, {"allocator_bytes", e.allocator},
                              {"runtime_bytes", e.runtime}, {"total_bytes", e.total}, {"host_bytes", e.host},
                              {"model_states_bytes", e.model_states},
                              {"held_parameters_bytes", e.held.parameters},
                              {"held_gradients_bytes", e.held.gradients},
                              {"held_optimizer_state_bytes", e.held.optimizer_state}, {"peak_at", e.peak_at},
                              {"notes", e.notes}});
    const auto z = fsdpp::zero_model_states(rep.psi, std::max(1, world_sizes[i] / tp_degree));
    j["zero_model_states_bytes"].push_back({{"world_size", world_sizes[i]}, {"no_shard", z.no_shard},
                                            {"zero1", z.zero1}, {"zero2", z.zero2}, {"zero3", z.zero3}});
  }
  for (size_t i = 0; i < ests.size(); ++i) {
    for (const auto& st : ests[i].stages)
      j["estimates"][i]["stages"].push_back({{"stage", st.stage}, {"rank", st.rank}, {"units", st.units},
                                             {"total_bytes", st.total}, {"in_flight", st.in_flight},
                                             {"held_weight_grads", st.held_weight_grads},
                                             {"peak_at", st.peak_at}});
  }
  for (size_t i = 0; i < recs.size(); ++i) {
    json r;
    r["world_size"] = world_sizes[i];
    r["chosen"] = recs[i].layout.empty() ? json(nullptr) : json(recs[i].layout);
    r["why"] = recs[i].why;
    r["command"] = recs[i].command;
    r["cluster"] = recs[i].cluster;
    for (const auto& c : recs[i].config_layout.candidates)
      r["candidates"].push_back({{"name", c.name}, {"total_bytes", c.estimate.total}, {"fits", c.fits},
                                 {"why", c.why}});
    j["recommendations"].push_back(r);
  }
  std::printf("%s\n", j.dump(1).c_str());
}

void print_text(const Report& rep) {
  const auto& o = rep.o;
  const auto& world_sizes = rep.world_sizes;
  const auto& ests = rep.ests;
  const auto& recs = rep.recs;
  const int tp_degree = o.tensor_parallel;
  int64_t biggest = 0;
  for (const auto& e : ests) biggest = std::max(biggest, e.total);
  const Units u = biggest >= (16ll << 30) ? Units{1024.0 * 1024 * 1024, "GiB"} : Units{1024.0 * 1024, "MiB"};
  std::printf("fsdpp-estimate: %s\n", rep.model_line.c_str());
  if (o.tensor_parallel > 1)
  std::printf("  tensor parallel %d%s (N counts all ranks; FSDP over N / %d; the batch is per data-parallel rank)\n",
              o.tensor_parallel, o.sequence_parallel ? " + sequence parallel" : "", o.tensor_parallel);
  if (o.expert_parallel > 1)
  std::printf("  expert parallel %d (each rank E / %d experts per sparse layer, FSDP over efsdp = dp_shard x tp / %d "
              "ranks for them (%d at N=%d), over dp_shard for the rest; tokens to their experts by all-to-all)\n",
              o.expert_parallel, o.expert_parallel, o.expert_parallel, ests.empty() ? 0 : ests[0].expert_shard_world,
              world_sizes.empty() ? 0 : world_sizes[0]);
  std::printf("  %s, batch %lld x %lld tokens per rank, params %s, reduce %s%s%s, prefetch forward %d / "
            "backward %d%s, %s, device %s\n",
            strategy_name(o.strategy).c_str(), static_cast<long long>(o.batch),
            static_cast<long long>(o.seq_len), fsdpp::to_string(o.param_dtype),
            fsdpp::to_string(o.reduce_dtype), o.activation_checkpointing ? ", checkpointing" : "",
            o.cpu_offload ? ", CPU offload" : "", o.forward_prefetch, o.backward_prefetch,
            o.backward_prefetch_post ? " (post)" : "", rep.optimizer.empty() ? "adamw" : rep.optimizer.c_str(),
            rep.device.c_str());
  for (const auto& n : rep.notes) std::printf("  note: %s\n", n.c_str());
  std::printf("\nper rank at the step's peak (%s)  ", u.name);
  for (int n : world_sizes) std::printf("%12s", fmt::format("N={}", n).c_str());
  std::printf("\n");
  auto row = [&](const char* name, auto get) {
  std::printf("  %-38s", name);
  for (const auto& e : ests) std::printf("%12s", fmt_bytes(get(e), u).c_str());
  std::printf("\n");
  };
  row("parameters (shards)", [](const auto& e) { return e.parameters; });
  row("gradients", [](const auto& e) { return e.gradients; });
  row("optimizer state", [](const auto& e) { return e.optimizer_state; });
  row("unsharded units in flight", [](const auto& e) { return e.unsharded; });
  row("activations", [](const auto& e) { return e.activations; });
  if (o.teacher) row("distillation teacher", [](const auto& e) { return e.teacher; });
  if (!o.device_is_gpu) row("allocator (glibc heap) retention", [](const auto& e) { return e.allocator; });
  row("runtime (LibTorch, Gloo, process)", [](const auto& e) { return e.runtime; });
  row("total", [](const auto& e) { return e.total; });
  if (o.cpu_offload && o.device_is_gpu) row("host (offloaded)", [](const auto& e) { return e.host; });
  std::printf("  %-38s", "peak at");
  for (const auto& e : ests) std::printf("  %s;", e.peak_at.c_str());
  std::printf("\n");
  for (size_t i = 0; i < ests.size(); ++i)
  for (const auto& n : ests[i].notes) std::printf("  note (N=%d): %s\n", world_sizes[i], n.c_str());

  for (size_t i = 0; i < ests.size(); ++i) {
  if (ests[i].stages.empty()) continue;
  std::printf("\npipeline %d, %d microbatches of %lld, %s; N=%d (in flight: microbatches whose activations a "
              "stage holds at most; W: those waiting for their weight gradient)\n",
              o.pipeline.degree, o.pipeline.microbatches, static_cast<long long>(o.batch / o.pipeline.microbatches),
              o.pipeline.schedule.c_str(), world_sizes[i]);
  const int shown = ests[i].stages[static_cast<size_t>(ests[i].pipeline_stage)].rank;
  for (const auto& st : ests[i].stages) {
    const std::string units = st.units.front() + (st.units.size() > 1 ? " .. " + st.units.back() : "");
    std::printf("  %s stage %d on rank %d (%s): in flight %d, W %d; rank total %s %s\n",
                st.rank == shown ? "->" : "  ", st.stage, st.rank, units.c_str(), st.in_flight,
                st.held_weight_grads, fmt_bytes(st.total, u).c_str(), u.name);
  }
  }

  std::printf("\nZeRO model states per rank (Adam, mixed precision: 2+2+12 bytes per parameter, "
            "Rajbhandari et al. 2020; GB = 1e9 bytes), Psi = %.4g%s\n  %-38s", rep.psi,
            tp_degree > 1 ? " (a rank's TP slice; N / tp data-parallel ranks)" : "", "");
  for (int n : world_sizes) std::printf("%12s", fmt::format("N={}", n).c_str());
  std::printf("\n");
  auto zrow = [&](const char* name, auto get) {
  std::printf("  %-38s", name);
  for (int n : world_sizes) std::printf("%12s", fmt::format("{:.3g}", get(fsdpp::zero_model_states(rep.psi, std::max(1, n / tp_degree))) / 1e9).c_str());
  std::printf("\n");
  };
  zrow("baseline DDP, NO_SHARD  (2+2+K)Psi", [](const auto& z) { return z.no_shard; });
  zrow("ZeRO-1, ZERO1          (2+2+K/N)Psi", [](const auto& z) { return z.zero1; });
  zrow("ZeRO-2, SHARD_GRAD_OP  (2+(2+K)/N)Psi", [](const auto& z) { return z.zero2; });
  zrow("ZeRO-3, FULL_SHARD     (2+2+K)Psi/N", [](const auto& z) { return z.zero3; });

  for (size_t i = 0; i < recs.size(); ++i) {
  const auto& r = recs[i];
  std::printf("\nbudget %.2f GiB per rank, N=%d: %s\n", rep.budget_gb, world_sizes[i],
              !r.layout.empty() ? ("use " + r.layout).c_str()
                                : "nothing fits: add ranks, shorten sequences or shrink the batch");
  if (!r.why.empty()) std::printf("  %s\n", r.why.c_str());
  if (!r.command.empty()) std::printf("  %s\n", r.command.c_str());
  std::printf("  the config's layout, strategy by strategy:\n");
  for (size_t k = 0; k < r.config_layout.candidates.size(); ++k) {
    const auto& c = r.config_layout.candidates[k];
    std::printf("  %s %-42s %s\n", c.name == r.layout ? "->" : "  ", c.name.c_str(), c.why.c_str());
  }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fsdpp-estimate: memory per rank of an fsdpp training step (parameters, gradients, optimizer "
      "state, unsharded units in flight, activations, runtime), from a trainer config and key=value "
      "overrides, a model's shape or a parameter count. See docs/estimate.md."};
  std::string config_path;
  std::vector<std::string> overrides;
  app.add_option("config", config_path, "fsdpp-train YAML config (its model, batch, strategy, ...)");
  app.add_option("overrides", overrides, "key.path=value overrides of the config, as fsdpp-train takes");
  GivenAliases aliases;
  aliases.add_to(app);
  EstimateFlags flags;
  flags.add_to(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Bad flags are bad input, as its own checks say: exit 2 (CLI11's codes are > 100).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "[fsdpp-estimate] %s; see fsdpp-estimate --help\n", e.what());
    return 2;
  }

  try {
    const bool from_config = !config_path.empty();
    const bool from_params = !flags.params_text.empty();
    FSDPP_CHECK_AS(ConfigError, !from_params || (!from_config && !aliases.shape_given()),
                   "[estimate] give either a model (a config, or a shape: --dim, --n-heads, --num-experts, ...) "
                   "or --params, not both");
    FSDPP_CHECK_AS(ConfigError, from_params || from_config || aliases.shape_given(),
                   "[estimate] no model: give a trainer config, a Llama shape (--dim --n-layers --n-heads "
                   "--vocab-size) or --params");
    // Without a config the rotary tables follow the sequence (before every flag, which may say otherwise).
    std::vector<std::string> all;
    if (const auto seq_len = aliases.value_of("data.seq_len"); seq_len && !from_config)
      all.push_back("model.max_seq_len=" + *seq_len);
    all.insert(all.end(), overrides.begin(), overrides.end());
    aliases.overrides(all);
    const auto cfg = from_config ? fsdpp::train::TrainConfig::from_file(config_path, all)
                                 : fsdpp::train::TrainConfig::from_yaml_string(kNoConfig, all, "fsdpp-estimate's defaults");

    std::vector<std::string> notes;
    const int64_t vocab = fsdpp::train::configured_vocab(cfg, notes);
    // What fsdpp-train will run (the same function its memory check uses).
    auto ce = fsdpp::train::configured_estimate(cfg, vocab);
    if (!ce.skip.empty()) notes.push_back("fsdpp-train skips its memory check for this config: " + ce.skip);
    if (from_config) notes.insert(notes.end(), ce.notes.begin(), ce.notes.end());
    fsdpp::EstimateOptions o = ce.options;
    fsdpp::ModelDescription model = ce.model;
    std::string model_line;
    if (from_params) {
      FSDPP_CHECK_AS(ConfigError, !o.teacher.has_value(),
                     "[estimate] a distillation teacher needs the student's shape (its vocabulary and logits), "
                     "not --params");
      std::tie(model, model_line) = parameter_count_model(flags, aliases, cfg.model.n_layers, notes);
    } else {
      model_line = describe_line(cfg, vocab, model);
    }
    flags.apply(o, notes);
    if (!o.deferred_init)
      notes.push_back("the model built whole in fp32 on every rank before it is sharded (--build-whole)");
    if (o.teacher) {
      const auto& t = *o.teacher->model.shape;
      FSDPP_CHECK_AS(ConfigError, t.vocab_size == model.shape->vocab_size,
                     "[estimate] the teacher's vocabulary ({}) differs from the student's ({}); distillation "
                     "compares their logits token by token", t.vocab_size, model.shape->vocab_size);
      notes.push_back(fmt::format("distillation teacher: {} {:.2f} M parameters in {}", t.architecture(),
                                  o.teacher->model.num_params() / 1e6, fsdpp::to_string(o.teacher->dtype)));
    }
    flags.apply_runtime(o, notes);
    // Without --world-size: one tp x ep x pp group (a single rank without any).
    const auto world_sizes = parse_world_sizes(flags.world_text.empty()
        ? std::to_string(o.tensor_parallel * o.expert_parallel * o.pipeline.degree) : flags.world_text);
    Report rep{model, model_line, notes, o, world_sizes, {}, {}, flags.optimizer, flags.device, flags.budget_gb};
    // What the fsdpp-run line of --budget's answer trains.
    std::vector<std::string> run = {from_config ? config_path : "YOUR_CONFIG.yaml"};
    run.insert(run.end(), all.begin(), all.end());
    for (int n : world_sizes) {
      auto oo = o;
      oo.world_size = n;
      rep.ests.push_back(fsdpp::estimate_memory(model, oo));
      if (flags.budget_gb <= 0) continue;
      const int64_t dp = std::max(1, n / (o.tensor_parallel * std::max(1, o.pipeline.degree)));
      const int64_t global_batch = flags.global_batch ? *flags.global_batch
          : cfg.training.per_device_train_batch_size * cfg.training.gradient_accumulation_steps * dp;
      FSDPP_CHECK_AS(ConfigError, global_batch >= 1, "[estimate] --global-batch {}: expected >= 1", global_batch);
      rep.recs.push_back(budget_answer(model, oo, flags, global_batch, run, [&](const fsdpp::EstimateOptions& e) {
        return from_config ? fsdpp::train::layout_overrides_for(config_path, all, e) : fsdpp::train::layout_overrides(e);
      }));
    }
    if (flags.as_json) {
      print_json(rep);
    } else {
      print_text(rep);
    }
    return 0;
  } catch (const fsdpp::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
