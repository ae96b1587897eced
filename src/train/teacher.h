#pragma once
// The frozen teacher of knowledge distillation (distillation: in the config,
// docs/distillation.md): its own models::CausalLM loaded from distillation.teacher, FULL_SHARD
// units of its own over a process group of its own (so that its collectives are counted apart
// from the student's), no gradients, no optimizer state, forward under no-grad. It only
// all-gathers: nothing it computes has a gradient, so no reduce-scatter ever runs for it.
// Private to src/train.
//
//   Teacher teacher(cfg, world, student_vocab);
//   auto out = student.forward(x, y);
//   auto loss = teacher.loss(out, x, y);  // (1 - kd_ratio) * ce + kd_ratio * kd (+ MoE aux)

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include <nlohmann/json_fwd.hpp>

#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/distill_loss.h"
#include "init_from.h"

namespace fsdpp::train::detail {

// Throws ConfigError naming distillation.teacher when its directory is neither kind of model, or
// its vocabulary is not `student_vocab` (naming both), or top_k is above it. Reads configs only.
ModelSource check_teacher_source(const TrainConfig& cfg, int64_t student_vocab);

class Teacher {
 public:
  // Collective over the world: reads the teacher's config and weights, checks its vocabulary
  // against the student's (ConfigError naming both), shards it. The student's aux-loss
  // coefficient (MoE) comes from cfg.model.
  Teacher(const TrainConfig& cfg, dist::World& world, int64_t student_vocab);

  torch::nn::Module& module() { return lm_->module(); }
  const ModelSource& source() const { return source_; }
  std::string describe() const;

  // One micro-batch's training loss from the student's output on (x, y): the teacher's logits
  // for x under no-grad (freed when this returns; what the KD loss's backward needs of them, the
  // teacher's probabilities, lives until the student's backward), (1 - kd_ratio) * ce +
  // kd_ratio * kd, plus router_aux_loss_coef * aux_loss for a MoE student. Collective.
  at::Tensor loss(const models::CausalLMOutput& student, const at::Tensor& x, const at::Tensor& y);

  // Starts a step's figures: its kd and ce sums, and the teacher's collectives.
  void begin_step();
  // Adds the step's kd_loss and ce_loss (averaged over the micro-batches and the ranks: one
  // small all-reduce, so every rank calls it), teacher_all_gather_bytes and
  // teacher_reduce_scatter_bytes (this rank's) to a metrics.jsonl line.
  void log_step(nlohmann::json& line, dist::World& world, int64_t accum);

 private:
  ModelSource source_;
  std::unique_ptr<models::CausalLM> lm_;
  std::shared_ptr<dist::DeviceMesh> mesh_;
  DistillLossOptions options_;
  double kd_ratio_ = 0;
  double aux_loss_coef_ = 0;
  double kd_sum_ = 0, ce_sum_ = 0;
  dist::CommCounters comm_before_;
};

}  // namespace fsdpp::train::detail
