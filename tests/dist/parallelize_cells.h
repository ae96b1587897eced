#pragma once
// What the layout matrix of fsdpp::parallel::parallelize shares (tests/dist/test_parallelize*.cpp):
// the two tiny models, their batches, the single-process reference every layout must reproduce,
// a layout placed and trained, and a model in one process for checkpoints to load into.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/parallel/parallelize.h"
#include "fsdpp/state/state_dict.h"
#include "full_checkpoint.h"
#include "tiny_models.h"
#include "world_fixture.h"

namespace fsdpp::test::cells {

enum class Arch { kLlama, kQwen3Moe };
inline const char* name_of(Arch a) { return a == Arch::kLlama ? "Llama" : "Qwen3-MoE"; }

constexpr int kSteps = 6;
constexpr int kMicro = 2;      // microbatches of a step (gradient accumulation or the pipeline's)
constexpr int64_t kRows = 4;   // sequences of one global microbatch
constexpr int64_t kSeq = 16;
constexpr double kMaxNorm = 0.5;  // small enough that clipping acts on every step
constexpr double kTol = 1e-5;

inline models::LlamaConfig llama_config() {
  auto c = fsdpp::test::uneven_llama(/*n_layers=*/4, kSeq, /*seed=*/11);
  c.ffn_hidden = 42;
  return c;
}

inline models::Qwen3MoeConfig qwen3_config() {
  auto c = fsdpp::test::tiny_moe(/*n_layers=*/4, /*num_experts=*/8, /*seed=*/13);
  c.vocab_size = 61;
  c.intermediate_size = 42;
  c.moe_intermediate_size = 20;
  c.mlp_only_layers = {1};  // one dense layer among the sparse ones
  c.num_key_value_heads = 4;
  c.norm_topk_prob = true;
  c.router_aux_loss_coef = 0.02;  // large enough to matter in the gradients
  c.max_position_embeddings = kSeq;
  return c;
}

inline std::shared_ptr<models::ModelPlan> fresh(Arch a) {
  if (a == Arch::kLlama) return models::plan_of(models::Llama(llama_config()));
  return models::plan_of(models::Qwen3Moe(qwen3_config()));
}

// Global microbatch m of step s: kRows sequences of kSeq + 1 tokens.
inline at::Tensor micro_tokens(int step, int m) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(1000 + 16 * step + m);
  return torch::randint(0, 61, {kRows, kSeq + 1}, g);
}

inline torch::optim::AdamW adamw(std::vector<at::Tensor> params) {
  return torch::optim::AdamW(std::move(params), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
}

struct Reference {
  std::vector<double> losses, norms;
  std::vector<double> aux;  // the mean load-balancing loss of each step (0 for the Llama)
  std::map<std::string, at::Tensor> params;
};

// One process, the whole batch: kMicro microbatches accumulated, torch's clip_grad_norm_, AdamW.
inline const Reference& reference(Arch a) {
  static std::map<Arch, Reference> cache;
  if (auto it = cache.find(a); it != cache.end()) return it->second;
  auto plan = fresh(a);
  auto& lm = *plan->causal_lm();
  auto params = plan->module().parameters();
  auto opt = adamw(params);
  Reference ref;
  for (int s = 0; s < kSteps; ++s) {
    double loss = 0, aux = 0;
    for (int m = 0; m < kMicro; ++m) {
      auto t = micro_tokens(s, m);
      auto out = lm.forward(t.narrow(1, 0, kSeq), t.narrow(1, 1, kSeq));
      (out.loss / kMicro).backward();
      loss += out.loss.item<double>() / kMicro;
      if (out.aux_loss.defined()) aux += out.aux_loss.item<double>() / kMicro;
    }
    ref.aux.push_back(aux);
    ref.norms.push_back(torch::nn::utils::clip_grad_norm_(params, kMaxNorm));
    ref.losses.push_back(loss);
    opt.step();
    opt.zero_grad();
  }
  for (const auto& p : plan->module().named_parameters()) ref.params[p.key()] = p.value().detach().clone();
  return cache[a] = std::move(ref);
}

struct Layout {
  std::string name;
  parallel::ParallelDims dims;
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  bool sequence_parallel = false;
  std::optional<bool> split_experts;
  std::string schedule = "1F1B";
  int checkpoint_every = 0;
};

// A layout by name: its dims, strategy, sequence parallelism and schedule.
inline Layout L(std::string name, parallel::ParallelDims d,
                ShardingStrategy s = ShardingStrategy::FULL_SHARD, bool sp = false,
                const char* schedule = "1F1B") {
  Layout l;
  l.name = std::move(name);
  l.dims = d;
  l.strategy = s;
  l.sequence_parallel = sp;
  l.schedule = schedule;
  return l;
}

struct Placed {
  std::unique_ptr<parallel::Parallelized> p;
  std::unique_ptr<torch::optim::AdamW> opt;
};

inline Placed place(Arch a, const Layout& l) {
  parallel::ParallelizeOptions o;
  o.fsdp.strategy = l.strategy;
  o.sequence_parallel = l.sequence_parallel;
  o.split_experts = l.split_experts;
  o.microbatches = kMicro;
  o.schedule = l.schedule;
  o.checkpoint_every = l.checkpoint_every;
  Placed out;
  out.p = parallel::parallelize(fresh(a), world(), l.dims, o);
  out.opt = std::make_unique<torch::optim::AdamW>(adamw(out.p->parameters()));
  return out;
}

// This data-parallel rank's rows of step s: its part of every microbatch, one after another.
inline std::pair<at::Tensor, at::Tensor> my_rows(parallel::Parallelized& p, int s) {
  const auto& dp = p.mesh().group("dp");
  const int64_t n = kRows / dp->size();
  std::vector<at::Tensor> parts;
  for (int m = 0; m < kMicro; ++m) parts.push_back(micro_tokens(s, m).narrow(0, dp->rank() * n, n));
  auto t = at::cat(parts);
  return {t.narrow(1, 0, kSeq).contiguous(), t.narrow(1, 1, kSeq).contiguous()};
}

struct Worst {
  double loss = 0, norm = 0, param = 0;
  double aux = 0;  // StepLoss::aux_loss against the reference's (every rank of pp has it)
  std::string where;
};

// kSteps steps against the reference: the loss (averaged over the data-parallel ranks) and the
// gradient norm of every step; the caller compares the parameters through a FULL save.
inline Worst train(Arch a, Placed& placed) {
  const auto& ref = reference(a);
  auto& p = *placed.p;
  Worst w;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = my_rows(p, s);
    const auto step = p.forward_backward(x, y);
    const double norm = p.clip_grad_norm_(kMaxNorm);
    placed.opt->step();
    placed.opt->zero_grad();
    auto loss = torch::tensor({step.loss}, torch::kDouble);
    p.mesh().group("dp")->all_reduce(loss, dist::ReduceOp::SUM, {"test loss"});
    const double mean = loss.item<double>() / p.dims().dp();
    w.loss = std::max(w.loss, std::abs(mean - ref.losses[static_cast<size_t>(s)]));
    // Over the global microbatch already (the same on every data-parallel rank).
    w.aux = std::max(w.aux, std::abs(step.aux_loss - ref.aux[static_cast<size_t>(s)]));
    const double want = ref.norms[static_cast<size_t>(s)];
    w.norm = std::max(w.norm, std::abs(norm - want) / want);
  }
  return w;
}

inline state::SaveOptions save_options(state::StateDictType type) {
  state::SaveOptions o;
  o.type = type;
  o.skip_buffer = models::is_non_persistent_buffer;
  return o;
}

inline state::LoadOptions load_options() {
  state::LoadOptions o;
  o.skip_buffer = models::is_non_persistent_buffer;
  return o;
}

// The largest difference between a FULL checkpoint's parameters and the reference's.
inline double worst_param(Arch a, const std::filesystem::path& full, std::string* where) {
  const auto& ref = reference(a);
  double worst = 0;
  auto got = read_full_checkpoint(full);
  for (const auto& [name, want] : ref.params) {
    const auto key = "model.safetensors:" + name;
    if (!got.count(key)) {
      *where = key + " missing";
      return INFINITY;
    }
    const double d = (got.at(key) - want).abs().max().item<double>();
    if (d > worst) *where = name;
    worst = std::max(worst, d);
  }
  return worst;
}

// The model in one process on every rank (each its own mesh of one), for checkpoints to load
// into: fully_shard over a group of one.
struct OneProcess {
  std::shared_ptr<models::ModelPlan> plan;
  std::unique_ptr<torch::optim::AdamW> opt;
  std::shared_ptr<dist::ProcessGroup> group;
};

inline OneProcess one_process(Arch a) {
  auto& w = world();
  OneProcess out;
  out.plan = fresh(a);
  auto mesh = w.init_device_mesh({w.size(), 1}, {"ranks", "alone"});
  FullyShardOptions o;
  o.mesh = mesh->sub({"alone"});
  apply_fully_shard(out.plan->module(), transformer_layer_policy(out.plan->block_classes()), o);
  out.opt = std::make_unique<torch::optim::AdamW>(adamw(out.plan->module().parameters()));
  out.group = mesh->group("alone");
  return out;
}

}  // namespace fsdpp::test::cells
