#pragma once
// What the pipeline's distributed tests share: a tiny Llama, its batches, the single-process
// reference they are checked against, and a rank's stages of it (tests/dist/test_pipeline*.cpp).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/pipeline/runtime.h"
#include "fsdpp/pipeline/schedules.h"
#include "fsdpp/pipeline/simulate.h"
#include "tiny_models.h"
#include "world_fixture.h"

namespace fsdpp::test::pipeline_llama {

namespace pp = fsdpp::pipeline;
using namespace fsdpp;

constexpr int kSteps = 10;
constexpr int64_t kSeq = 16;
constexpr int64_t kMicrobatchSize = 2;
constexpr double kMaxNorm = 0.5;  // small enough that clipping acts
constexpr double kTol = 1e-5;

inline models::LlamaConfig tiny_llama(int64_t n_layers, int64_t dim = 32, int64_t seq = kSeq) {
  return fsdpp::test::tiny_llama(n_layers, seq, /*seed=*/17, dim);
}

struct Batch {
  at::Tensor tokens, targets;  // (B, T) int64
};

inline Batch batch(int step, int64_t size, const models::LlamaConfig& cfg, int64_t seq = kSeq) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(500 + step);
  auto t = torch::randint(0, cfg.vocab_size, {size, seq + 1}, g);
  return {t.narrow(1, 0, seq).contiguous(), t.narrow(1, 1, seq).contiguous()};
}

// lr 1e-3: Adam divides each gradient by its running size, so an element whose gradient is a
// near-cancelling sum moves by lr whatever its rounding; summed per microbatch instead of over
// the whole batch, such an element differs by ~1e-3 relative in fp32. At lr 1e-2 that reached
// 1.6e-5 after ten steps (Interleaved1F1B, m = 3); the same runs in float64 agree within 1e-9.
inline torch::optim::AdamW adamw(std::vector<at::Tensor> params) {
  return torch::optim::AdamW(std::move(params), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
}

struct Reference {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
};

// Single-process training on the whole batch: the reference every layout must reproduce.
inline Reference reference(const models::LlamaConfig& cfg, int64_t batch_size) {
  models::Llama model(cfg);
  auto opt = adamw(model->parameters());
  Reference ref;
  for (int step = 0; step < kSteps; ++step) {
    auto b = batch(step, batch_size, cfg);
    opt.zero_grad();
    auto out = model->forward(b.tokens, b.targets);
    out.loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), kMaxNorm);
    opt.step();
    ref.losses.push_back(out.loss.item<double>());
  }
  for (const auto& p : model->named_parameters()) ref.params[p.key()] = p.value().detach().clone();
  return ref;
}

// This rank's stages of a Llama built whole from its seed.
inline std::vector<pp::PipelineStage> llama_stages(models::Llama& model,
                                                   const pp::PipelineSchedule& s, int pp_rank,
                                                   std::vector<models::LlamaStage>* all = nullptr) {
  const auto& cfg = model->config();
  auto stages = models::split_llama(
      model, models::even_units_per_stage(models::llama_pipeline_units(cfg), s.num_stages));
  std::vector<pp::PipelineStage> mine;
  for (int i : s.stages_of(pp_rank)) {
    auto st = stages[static_cast<size_t>(i)];
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss;
    if (i == s.num_stages - 1) {
      loss = [st](const at::Tensor& y, const at::Tensor& t) { return st->loss(y, t); };
    }
    std::optional<pp::TensorSpec> spec;
    if (i > 0) spec = pp::TensorSpec{{-1, -1, cfg.dim}, at::kFloat};
    mine.push_back(pp::make_stage(i, st, loss, spec));
  }
  if (all) *all = stages;
  return mine;
}

struct Mismatch {
  int checked = 0;
  std::string first;
  void check(const std::string& what, double got, double want) {
    ++checked;
    if (first.empty() && !(std::abs(got - want) <= kTol)) {
      first = fmt::format("{}: {} vs single-process {}", what, got, want);
    }
  }
  void check(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
    ++checked;
    if (!first.empty()) return;
    if (got.sizes() != want.sizes()) {
      first = fmt::format("{}: shape {} vs {}", what, got.sizes(), want.sizes());
    } else if (double d = (got - want).abs().max().item<double>(); !(d <= kTol)) {
      first = fmt::format("{}: max difference {:.3g}", what, d);
    }
  }
};

// Ten steps of `schedule` on the pp group against the reference; returns the first mismatch.
inline std::string run_case(const std::string& name, int m, const models::LlamaConfig& cfg,
                     const std::shared_ptr<dist::ProcessGroup>& group,
                     std::map<int64_t, Reference>& refs) {
  const int p = group->size();
  const int64_t batch_size = m * kMicrobatchSize;
  if (!refs.count(batch_size)) refs[batch_size] = reference(cfg, batch_size);
  const auto& ref = refs.at(batch_size);
  auto sched = pp::make_schedule(name, p, m);
  models::Llama model(cfg);
  auto stages = llama_stages(model, sched, group->rank());
  pp::PipelineRuntime rt(sched, std::move(stages), group, {.store = test::world().store()});
  auto opt = adamw(rt.parameters());
  Mismatch mm;
  for (int step = 0; step < kSteps; ++step) {
    auto b = batch(step, batch_size, cfg);
    opt.zero_grad();
    auto out = rt.step(b.tokens, b.targets);
    fsdpp::clip_grad_norm_(rt.placed_params(), kMaxNorm, 2.0, {group});
    opt.step();
    mm.check(fmt::format("step {} loss", step), out.loss, ref.losses[static_cast<size_t>(step)]);
  }
  for (const auto& st : rt.stages()) {
    for (const auto& prm : st.module->named_parameters()) {
      mm.check(prm.key(), prm.value(), ref.params.at(prm.key()));
    }
  }
  return mm.first;
}

}  // namespace fsdpp::test::pipeline_llama
