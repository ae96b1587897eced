// fsdpp-estimate: memory per rank of a training run, before running it (docs/estimate.md).
//   fsdpp-estimate configs/default.yaml --world-size 1,2,4
//   fsdpp-estimate --dim 4096 --n-layers 32 --n-heads 32 --vocab-size 32000 --batch 1 --seq-len 4096 \
//       --world-size 8 --mixed-precision bf16 --device cuda --budget 80
//   fsdpp-estimate --params 7.5e9 --world-size 64            (model states; the ZeRO paper's table)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/estimate/llama_shape.h"
#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/memory_check.h"

namespace {

using nlohmann::json;

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
  return static_cast<int64_t>(std::llround(v * scale));
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

fsdpp::ShardingStrategy parse_strategy(const std::string& name) {
  std::string n;
  for (char c : name) n.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (n == "hybrid") n = "hybrid_shard";
  if (n == "ddp") n = "no_shard";
  return fsdpp::parse_sharding_strategy(n);
}

std::string strategy_name(fsdpp::ShardingStrategy s) { return fsdpp::to_string(s); }

struct Units {
  double scale;
  const char* name;
};

std::string fmt_bytes(int64_t b, Units u) { return fmt::format("{:.2f}", b / u.scale); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fsdpp-estimate: memory per rank of an fsdpp training step (parameters, gradients, optimizer "
      "state, unsharded units in flight, activations, runtime), from a trainer config or a model's "
      "shape or parameter count. See docs/estimate.md."};
  std::string config_path;
  std::vector<std::string> overrides;
  app.add_option("config", config_path, "fsdpp-train YAML config (its model, batch, strategy, ...)");
  app.add_option("overrides", overrides, "key.path=value overrides of the config, as fsdpp-train takes");
  std::string params_text;
  int64_t units = 0;
  app.add_option("--params", params_text, "a parameter count instead of a shape (7.5e9, 7.5B, 350M)");
  app.add_option("--units", units, "with --params: FSDP units (default: --n-layers + 1, or 1, with a warning)");
  bool build_whole = false;
  app.add_flag("--build-whole", build_whole,
               "every rank builds the whole model in fp32 before sharding it (a model made without "
               "deferred initialisation: model.deferred_init=off, or a user's built whole); default: "
               "made without storage, each rank allocating only its shards");
  int64_t vocab = 0, dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, ffn_hidden = 0, multiple_of = 32,
          max_seq_len = 0;
  bool tie = false;
  app.add_option("--vocab-size", vocab, "Llama shape: vocabulary");
  app.add_option("--dim", dim, "Llama shape: model width");
  app.add_option("--n-layers", n_layers, "Llama shape: TransformerBlocks");
  app.add_option("--n-heads", n_heads, "Llama shape: query heads");
  app.add_option("--n-kv-heads", n_kv_heads, "Llama shape: key/value heads (0: n_heads)");
  app.add_option("--ffn-hidden", ffn_hidden, "Llama shape: SwiGLU width (0: 2/3*4*dim rounded to --multiple-of)");
  app.add_option("--multiple-of", multiple_of, "Llama shape: rounding of the SwiGLU width");
  app.add_flag("--tie-embeddings", tie, "Llama shape: the output layer reuses the embedding");
  app.add_option("--max-seq-len", max_seq_len, "Llama shape: rows of the rotary tables (0: --seq-len)");
  std::string architecture;
  int64_t head_dim = 0, num_experts = 0, top_k = 0, moe_intermediate = 0, sparse_step = 0;
  std::vector<int64_t> mlp_only;
  int ep = 0;
  std::string teacher_path, teacher_dtype;
  fsdpp::EstimateOptions::Pipeline pipe;
  pipe.degree = 0;
  pipe.microbatches = 0;
  pipe.schedule.clear();
  app.add_option("--pp", pipe.degree, "pipeline-parallel degree: the Llama cut into stages over groups of this many "
                 "ranks (--world-size counts all ranks; FSDP over world / pp)");
  app.add_option("--microbatches", pipe.microbatches, "pipeline: microbatches per step (--batch is split into them)");
  app.add_option("--schedule", pipe.schedule, "pipeline: GPipe, 1F1B (default), Interleaved1F1B, ZBH1, "
                 "InterleavedZeroBubble, ZBVZeroBubble");
  app.add_option("--layers-per-stage", pipe.layers_per_stage, "pipeline: units per stage, the embedding and head "
                 "counting as units (default: as even as can be)");
  app.add_option("--stages-per-rank", pipe.stages_per_rank, "pipeline: stages per rank of the interleaved schedules "
                 "(default 2)");
  app.add_option("--stage", pipe.stage, "pipeline: report the rank of this stage (default: the most loaded rank)");
  app.add_option("--teacher-config", teacher_path,
                 "distillation: the teacher, a model directory (fsdpp checkpoint or Hugging Face) or an "
                 "fsdpp-train YAML config whose model: it is (default: the config's distillation.teacher)");
  app.add_option("--teacher-dtype", teacher_dtype, "distillation: the teacher's parameters, fp32 (default) or bf16");
  app.add_option("--architecture", architecture, "llama (default) or qwen3_moe (a config's model.architecture)");
  app.add_option("--head-dim", head_dim, "qwen3_moe: head_dim (0: dim / n_heads)");
  app.add_option("--num-experts", num_experts, "qwen3_moe: experts per sparse layer (implies --architecture qwen3_moe)");
  app.add_option("--num-experts-per-tok,--top-k", top_k, "qwen3_moe: experts each token is sent to (default 2)");
  app.add_option("--moe-intermediate-size", moe_intermediate,
                 "qwen3_moe: an expert's SwiGLU width (default --ffn-hidden / top-k)");
  app.add_option("--decoder-sparse-step", sparse_step, "qwen3_moe: layer i sparse when (i+1) % step == 0 (default 1)");
  app.add_option("--mlp-only-layers", mlp_only, "qwen3_moe: layers that stay dense")->delimiter(',');
  app.add_option("--ep", ep, "expert-parallel degree: experts split over groups of this many ranks, "
                 "sharded by FSDP over world / ep, the rest of the model over the world");
  std::string world_text, strategy_text, param_dtype, reduce_dtype, mixed, device = "cpu", optimizer;
  int64_t batch = 0, seq_len = 0;
  int forward_prefetch = -1, backward_prefetch = -1, limit_all_gathers = -1, shard_group = 0;
  bool backward_post = false;
  bool ckpt = false, offload = false, as_json = false, sequence_parallel = false;
  int tp = 0;
  double runtime_mb = -1, budget_gb = 0;
  app.add_option("--world-size,-n", world_text, "ranks; several as 8,16,64 (default 1, or --tp: one tp group)");
  app.add_option("--strategy,-s", strategy_text,
                 "full_shard | shard_grad_op | no_shard | hybrid_shard | hybrid_shard_zero2 | zero1");
  app.add_option("--tp", tp, "tensor-parallel degree (the Llama plan over groups of this many ranks; "
                 "--world-size counts all ranks, FSDP shards over world / tp)");
  app.add_flag("--sequence-parallel", sequence_parallel,
               "with --tp: norms and residuals split along the sequence");
  app.add_option("--shard-group-size", shard_group, "HYBRID: ranks per shard group (default min(N, 8))");
  app.add_option("--mixed-precision", mixed, "bf16 or fp16: parameters and gradient reduction in it, fp32 master");
  app.add_option("--param-dtype", param_dtype, "fp32 | bf16 | fp16 (gathered parameters, compute)");
  app.add_option("--reduce-dtype", reduce_dtype, "fp32 | bf16 | fp16 (gradient reduction)");
  app.add_flag("--activation-checkpointing", ckpt, "re-compute every TransformerBlock in backward");
  app.add_flag("--cpu-offload", offload, "parameter/gradient shards and optimizer state on the host");
  app.add_option("--device", device, "cpu (everything is host memory) or cuda");
  app.add_option("--batch,-b", batch, "sequences per rank per micro-step");
  app.add_option("--seq-len,-t", seq_len, "tokens per sequence");
  app.add_option("--forward-prefetch", forward_prefetch, "units gathered ahead in forward (default 0)");
  app.add_option("--backward-prefetch", backward_prefetch,
                 "units gathered ahead in backward (default 1, fully_shard's BACKWARD_PRE; 0: none)");
  app.add_flag("--backward-prefetch-post", backward_post, "BACKWARD_POST: prefetch after each unit's backward");
  app.add_option("--limit-all-gathers", limit_all_gathers, "most prefetched gathers in flight (default 2; 0: no bound)");
  app.add_option("--optimizer", optimizer, "adamw (default) | adam | sgd | sgd_momentum");
  bool optimizer_on_disk = false;
  app.add_flag("--optimizer-state-on-disk", optimizer_on_disk,
               "the optimizer state in memory-mapped files, one parameter's in memory at a time "
               "(fsdp_offload_optimizer_state_dir)");
  app.add_option("--runtime-baseline-mb", runtime_mb,
                 "the runtime's own memory per rank in MiB (default: measured by fsdpp-bench baseline)");
  app.add_option("--budget", budget_gb, "memory per rank in GiB: recommend the fastest configuration that fits");
  bool budget_gpu = false;
  app.add_flag("--budget-gpu", budget_gpu,
               "the budget is this machine's first GPU's memory (cudaMemGetInfo's total); implies --device cuda");
  int64_t mmap_threshold = -1;
  app.add_option("--mmap-threshold", mmap_threshold,
                 "CPU: glibc's mmap threshold in bytes, fixed as MALLOC_MMAP_THRESHOLD_ sets it (default: "
                 "a config's training.malloc_mmap_threshold, else that variable, else 0: glibc's "
                 "dynamic threshold)");
  app.add_flag("--json", as_json, "machine-readable output");
  CLI11_PARSE(app, argc, argv);

  try {
    fsdpp::EstimateOptions o;
    std::vector<std::string> notes;
    std::optional<fsdpp::ModelDescription> model;
    std::string model_line;
    std::optional<fsdpp::models::Qwen3MoeConfig> qwen3;  // the config's, when it names qwen3_moe
    if (!config_path.empty()) {
      const auto cfg = fsdpp::train::TrainConfig::from_file(config_path, overrides);
      int64_t tok_vocab = 256;
      if (cfg.data.tokenizer == fsdpp::train::TokenizerType::SENTENCEPIECE) {
        tok_vocab = cfg.data.tokenizer_vocab_size;
        if (cfg.model.vocab_size == 0)
          notes.push_back(fmt::format("vocabulary taken as data.tokenizer_vocab_size={}", tok_vocab));
      }
      // What fsdpp-train will run (the same function its memory check uses); flags override it.
      const auto ce = fsdpp::train::configured_estimate(cfg, tok_vocab, /*world_size=*/1,
                                                        /*local_world_size=*/0);
      const auto& sh = *ce.model.shape;
      if (cfg.model.architecture != fsdpp::train::ModelArchitecture::LLAMA) {
        qwen3 = cfg.qwen3_moe_config(tok_vocab);
        if (architecture.empty()) architecture = "qwen3_moe";
      }
      if (ep == 0) ep = ce.options.expert_parallel;
      vocab = vocab ? vocab : sh.vocab_size;
      dim = dim ? dim : sh.dim;
      n_layers = n_layers ? n_layers : sh.n_layers;
      n_heads = n_heads ? n_heads : sh.n_heads;
      n_kv_heads = n_kv_heads ? n_kv_heads : sh.n_kv_heads;
      ffn_hidden = ffn_hidden ? ffn_hidden : sh.ffn_hidden;
      tie = tie || sh.tie_embeddings;
      if (max_seq_len == 0) max_seq_len = sh.max_seq_len;
      const auto& co = ce.options;
      if (batch == 0) batch = co.batch;
      if (seq_len == 0) seq_len = co.seq_len;
      if (strategy_text.empty()) o.strategy = co.strategy;
      if (mmap_threshold < 0 && co.mmap_threshold > 0) mmap_threshold = co.mmap_threshold;
      if (mixed.empty() && param_dtype.empty() && co.param_dtype != fsdpp::EstimateDType::FP32) {
        param_dtype = fsdpp::to_string(co.param_dtype);
        if (reduce_dtype.empty()) reduce_dtype = fsdpp::to_string(co.reduce_dtype);
      }
      ckpt = ckpt || co.activation_checkpointing;
      offload = offload || co.cpu_offload;
      if (backward_prefetch < 0) backward_prefetch = co.backward_prefetch;
      backward_post = backward_post || co.backward_prefetch_post;
      if (forward_prefetch < 0) forward_prefetch = co.forward_prefetch;
      if (limit_all_gathers < 0) limit_all_gathers = co.limit_all_gathers;
      if (shard_group == 0) shard_group = co.shard_group_size;
      if (tp == 0) tp = co.tensor_parallel;
      o.pipeline = co.pipeline;  // flags below override it
      o.teacher = co.teacher;
      if (!ce.skip.empty()) notes.push_back("fsdpp-train skips its memory check for this config: " + ce.skip);
      build_whole = build_whole || !co.deferred_init;
      optimizer_on_disk = optimizer_on_disk || co.optimizer_state_on_disk;
      sequence_parallel = sequence_parallel || co.sequence_parallel;
      notes.insert(notes.end(), ce.notes.begin(), ce.notes.end());
    }
    if (!strategy_text.empty()) o.strategy = parse_strategy(strategy_text);
    if (num_experts > 0 && architecture.empty()) architecture = "qwen3_moe";
    FSDPP_CHECK_AS(ConfigError, architecture.empty() || architecture == "llama" || architecture == "qwen3_moe",
                   "[estimate] --architecture '{}' is not known; expected llama or qwen3_moe", architecture);
    if (architecture == "qwen3_moe") {
      FSDPP_CHECK_AS(ConfigError, params_text.empty(),
                     "[estimate] give either a shape (--dim, --n-layers, --num-experts, ...) or --params, not both");
      // The config's model (or Qwen3MoeConfig's defaults), the flags given over it.
      fsdpp::models::Qwen3MoeConfig qc = qwen3.value_or(fsdpp::models::Qwen3MoeConfig{});
      if (vocab) qc.vocab_size = vocab;
      if (dim) qc.hidden_size = dim;
      if (n_layers) qc.num_hidden_layers = n_layers;
      if (n_heads) qc.num_attention_heads = n_heads;
      if (n_kv_heads) qc.num_key_value_heads = n_kv_heads;
      if (head_dim) {
        qc.head_dim = head_dim;
      } else if (!qwen3 && dim && n_heads) {
        qc.head_dim = dim / n_heads;
      }
      if (num_experts) qc.num_experts = num_experts;
      if (top_k) qc.num_experts_per_tok = top_k;
      if (ffn_hidden) qc.intermediate_size = ffn_hidden;
      if (moe_intermediate) {
        qc.moe_intermediate_size = moe_intermediate;
      } else if (!qwen3 && ffn_hidden) {
        qc.moe_intermediate_size = ffn_hidden / qc.num_experts_per_tok;
      }
      if (sparse_step) qc.decoder_sparse_step = sparse_step;
      if (!mlp_only.empty()) qc.mlp_only_layers = mlp_only;
      if (max_seq_len) qc.max_position_embeddings = max_seq_len;
      else if (!qwen3) qc.max_position_embeddings = std::max<int64_t>(seq_len, 1);
      qc.tie_word_embeddings = qc.tie_word_embeddings || tie;
      qc.validate();
      const auto shape = fsdpp::decoder_shape_of(qc);
      model = fsdpp::describe_decoder(shape);
      const auto counts = fsdpp::count_parameters(*model);
      std::string dense;
      for (int64_t i = 0; i < qc.num_hidden_layers; ++i)
        if (!qc.is_sparse_layer(i)) dense += (dense.empty() ? "" : ",") + std::to_string(i);
      model_line = fmt::format(
          "Qwen3-MoE {:.2f} M parameters, {:.2f} M active per token (experts {:.2f} M; dim {}, {} layers, {} "
          "heads / {} kv of {}, {} experts top-{} of SwiGLU {}, dense layers [{}] of SwiGLU {}, vocab {}, {} head)",
          counts.total / 1e6, counts.active / 1e6, counts.experts / 1e6, qc.hidden_size, qc.num_hidden_layers,
          qc.num_attention_heads, qc.num_key_value_heads, qc.head_dim, qc.num_experts, qc.num_experts_per_tok,
          qc.moe_intermediate_size, dense, qc.intermediate_size, qc.vocab_size,
          qc.tie_word_embeddings ? "tied" : "untied");
    } else if (dim > 0) {
      FSDPP_CHECK_AS(ConfigError, params_text.empty(),
                     "[estimate] give either a shape (--dim, --n-layers, ...) or --params, not both");
      fsdpp::models::LlamaConfig lc;
      lc.vocab_size = vocab;
      lc.dim = dim;
      lc.n_layers = n_layers;
      lc.n_heads = n_heads;
      lc.n_kv_heads = n_kv_heads;
      lc.ffn_hidden = ffn_hidden;
      lc.multiple_of = multiple_of;
      lc.max_seq_len = max_seq_len > 0 ? max_seq_len : std::max<int64_t>(seq_len, 1);
      lc.validate();
      lc.tie_embeddings = tie;
      const auto shape = fsdpp::decoder_shape_of(lc);
      model = fsdpp::describe_decoder(shape);
      model_line = fmt::format("Llama {:.2f} M parameters (dim {}, {} layers, {} heads / {} kv, SwiGLU {}, vocab {}, {} head)",
                               model->num_params() / 1e6, shape.dim, shape.n_layers, shape.n_heads,
                               shape.n_kv_heads, shape.ffn_hidden, shape.vocab_size, tie ? "tied" : "untied");
    } else {
      FSDPP_CHECK_AS(ConfigError, !params_text.empty(),
                     "[estimate] no model: give a trainer config, a Llama shape (--dim --n-layers --n-heads "
                     "--vocab-size) or --params");
      const int64_t p = parse_count(params_text);
      if (units <= 0 && n_layers <= 0) {
        std::fprintf(stderr,
                     "fsdpp-estimate: warning: --params without --units takes the model as one FSDP "
                     "unit, gathered whole at once: the 'unsharded units' and the peak are then the "
                     "whole model's. Give --units (a Llama of L blocks has L + 1: the blocks and the "
                     "root) or --n-layers\n");
        notes.push_back("one FSDP unit: --params without --units (the whole model gathered at once)");
      }
      if (units <= 0) units = n_layers > 0 ? n_layers + 1 : 1;
      model = fsdpp::describe_parameter_count(p, units);
      model_line = fmt::format("{:.4g} parameters in {} equal unit(s); activations not estimated (no shape)",
                               static_cast<double>(p), units);
    }
    if (!mixed.empty()) {
      o.param_dtype = o.reduce_dtype = fsdpp::parse_estimate_dtype(mixed);
    }
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
    o.activation_checkpointing = ckpt;
    o.cpu_offload = offload;
    o.deferred_init = !build_whole;
    o.optimizer_state_on_disk = optimizer_on_disk;
    if (build_whole) notes.push_back("the model built whole in fp32 on every rank before it is sharded (--build-whole)");
    o.batch = batch > 0 ? batch : 1;
    o.seq_len = seq_len > 0 ? seq_len : 1;
    if (forward_prefetch >= 0) o.forward_prefetch = forward_prefetch;
    if (backward_prefetch >= 0) o.backward_prefetch = backward_prefetch;
    o.backward_prefetch_post = backward_post;
    if (limit_all_gathers >= 0) o.limit_all_gathers = limit_all_gathers;
    o.shard_group_size = shard_group;
    o.tensor_parallel = tp > 0 ? tp : 1;
    o.sequence_parallel = sequence_parallel;
    o.expert_parallel = ep > 0 ? ep : 1;
    if (pipe.degree > 0) o.pipeline.degree = pipe.degree;
    if (pipe.microbatches > 0) o.pipeline.microbatches = pipe.microbatches;
    if (!pipe.schedule.empty()) o.pipeline.schedule = pipe.schedule;
    if (pipe.layers_per_stage > 0) o.pipeline.layers_per_stage = pipe.layers_per_stage;
    if (pipe.stages_per_rank > 0) o.pipeline.stages_per_rank = pipe.stages_per_rank;
    o.pipeline.stage = pipe.stage;
    // Without --microbatches: as many as the degree when the batch divides, else one.
    if (o.pipeline.degree > 1 && pipe.microbatches <= 0 && pipe.degree > 0)
      o.pipeline.microbatches = o.batch % o.pipeline.degree == 0 ? o.pipeline.degree : 1;
    if (!optimizer.empty()) o.optimizer = fsdpp::parse_estimate_optimizer(optimizer);
    if (!teacher_path.empty()) {
      FSDPP_CHECK_AS(ConfigError, model->shape.has_value(),
                     "[estimate] a distillation teacher needs the student's shape (its vocabulary and logits), "
                     "not --params");
      const auto& sh = *model->shape;
      // Gathered and computed in float32, as fsdpp-train's teacher on the CPU.
      o.teacher = fsdpp::EstimateOptions::Teacher{fsdpp::train::describe_teacher(teacher_path, sh.vocab_size),
                                                  o.teacher ? o.teacher->dtype : fsdpp::EstimateDType::FP32,
                                                  fsdpp::EstimateDType::FP32};
    }
    if (!teacher_dtype.empty()) {
      FSDPP_CHECK_AS(ConfigError, o.teacher.has_value(),
                     "[estimate] --teacher-dtype without a teacher; give --teacher-config (or a config with "
                     "distillation.teacher)");
      o.teacher->dtype = fsdpp::parse_estimate_dtype(teacher_dtype);
    }
    if (o.teacher) {
      const auto& t = *o.teacher->model.shape;
      FSDPP_CHECK_AS(ConfigError, t.vocab_size == model->shape->vocab_size,
                     "[estimate] the teacher's vocabulary ({}) differs from the student's ({}); distillation "
                     "compares their logits token by token", t.vocab_size, model->shape->vocab_size);
      notes.push_back(fmt::format("distillation teacher: {} {:.2f} M parameters in {}", t.architecture(),
                                  o.teacher->model.num_params() / 1e6, fsdpp::to_string(o.teacher->dtype)));
    }
    if (runtime_mb >= 0) {
      o.runtime_baseline_bytes = static_cast<int64_t>(runtime_mb * 1024 * 1024);
    } else if (o.device_is_gpu) {
      o.runtime_baseline_bytes = 0;
      notes.push_back("runtime: 0 on a GPU device (give --runtime-baseline-mb with your CUDA context's size)");
    }
    if (mmap_threshold < 0) {
      // What the run will get if it inherits this environment.
      const char* env = std::getenv("MALLOC_MMAP_THRESHOLD_");
      mmap_threshold = env ? std::atoll(env) : 0;
    }
    o.mmap_threshold = mmap_threshold;
    // Without --world-size: one tp (or ep) group (a single rank without either).
    const auto world_sizes = parse_world_sizes(
        world_text.empty() ? std::to_string(o.tensor_parallel * o.expert_parallel * o.pipeline.degree) : world_text);

    std::vector<fsdpp::MemoryEstimate> ests;
    for (int n : world_sizes) {
      auto oo = o;
      oo.world_size = n;
      ests.push_back(fsdpp::estimate_memory(*model, oo));
    }
    // Under TP the paper's data-parallel accounting applies to a rank's slice over N / tp ranks.
    const int tp_degree = o.tensor_parallel;
    const double psi = static_cast<double>(fsdpp::tensor_parallel_slice(*model, tp_degree).num_params());
    std::vector<fsdpp::Recommendation> recs;
    if (budget_gb > 0) {
      for (int n : world_sizes) {
        auto oo = o;
        oo.world_size = n;
        recs.push_back(fsdpp::recommend(*model, oo, static_cast<int64_t>(budget_gb * 1024 * 1024 * 1024)));
      }
    }

    if (as_json) {
      json j;
      j["model"] = model_line;
      j["num_params"] = model->num_params();
      j["num_active_params"] = fsdpp::count_parameters(*model).active;
      j["notes"] = notes;
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
                                  {"model_states_bytes", e.model_states}, {"peak_at", e.peak_at},
                                  {"notes", e.notes}});
        const auto z = fsdpp::zero_model_states(psi, std::max(1, world_sizes[i] / tp_degree));
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
        r["chosen"] = recs[i].chosen >= 0 ? json(recs[i].candidates[recs[i].chosen].name) : json(nullptr);
        for (const auto& c : recs[i].candidates)
          r["candidates"].push_back({{"name", c.name}, {"total_bytes", c.estimate.total}, {"fits", c.fits},
                                     {"why", c.why}});
        j["recommendations"].push_back(r);
      }
      std::printf("%s\n", j.dump(1).c_str());
      return 0;
    }

    int64_t biggest = 0;
    for (const auto& e : ests) biggest = std::max(biggest, e.total);
    const Units u = biggest >= (16ll << 30) ? Units{1024.0 * 1024 * 1024, "GiB"} : Units{1024.0 * 1024, "MiB"};
    std::printf("fsdpp-estimate: %s\n", model_line.c_str());
    if (o.tensor_parallel > 1)
      std::printf("  tensor parallel %d%s (N counts all ranks; FSDP over N / %d; the batch is per data-parallel rank)\n",
                  o.tensor_parallel, o.sequence_parallel ? " + sequence parallel" : "", o.tensor_parallel);
    if (o.expert_parallel > 1)
      std::printf("  expert parallel %d (each rank E / %d experts per sparse layer, FSDP over N / %d for them, over N "
                  "for the rest; tokens to their experts by all-to-all)\n",
                  o.expert_parallel, o.expert_parallel, o.expert_parallel);
    std::printf("  %s, batch %lld x %lld tokens per rank, params %s, reduce %s%s%s, prefetch forward %d / "
                "backward %d%s, %s, device %s\n",
                strategy_name(o.strategy).c_str(), static_cast<long long>(o.batch),
                static_cast<long long>(o.seq_len), fsdpp::to_string(o.param_dtype),
                fsdpp::to_string(o.reduce_dtype), o.activation_checkpointing ? ", checkpointing" : "",
                o.cpu_offload ? ", CPU offload" : "", o.forward_prefetch, o.backward_prefetch,
                o.backward_prefetch_post ? " (post)" : "", optimizer.empty() ? "adamw" : optimizer.c_str(),
                device.c_str());
    for (const auto& n : notes) std::printf("  note: %s\n", n.c_str());
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
                "Rajbhandari et al. 2020; GB = 1e9 bytes), Psi = %.4g%s\n  %-38s", psi,
                tp_degree > 1 ? " (a rank's TP slice; N / tp data-parallel ranks)" : "", "");
    for (int n : world_sizes) std::printf("%12s", fmt::format("N={}", n).c_str());
    std::printf("\n");
    auto zrow = [&](const char* name, auto get) {
      std::printf("  %-38s", name);
      for (int n : world_sizes) std::printf("%12s", fmt::format("{:.3g}", get(fsdpp::zero_model_states(psi, std::max(1, n / tp_degree))) / 1e9).c_str());
      std::printf("\n");
    };
    zrow("baseline DDP, NO_SHARD  (2+2+K)Psi", [](const auto& z) { return z.no_shard; });
    zrow("ZeRO-1, ZERO1          (2+2+K/N)Psi", [](const auto& z) { return z.zero1; });
    zrow("ZeRO-2, SHARD_GRAD_OP  (2+(2+K)/N)Psi", [](const auto& z) { return z.zero2; });
    zrow("ZeRO-3, FULL_SHARD     (2+2+K)Psi/N", [](const auto& z) { return z.zero3; });

    for (size_t i = 0; i < recs.size(); ++i) {
      const auto& r = recs[i];
      std::printf("\nbudget %.2f GiB per rank, N=%d: %s\n", budget_gb, world_sizes[i],
                  r.chosen >= 0 ? ("use " + r.candidates[r.chosen].name).c_str()
                                : "nothing fits: add ranks, shorten sequences or shrink the batch");
      for (size_t k = 0; k < r.candidates.size(); ++k) {
        const auto& c = r.candidates[k];
        std::printf("  %s %-42s %s\n", static_cast<int>(k) == r.chosen ? "->" : "  ", c.name.c_str(), c.why.c_str());
      }
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
