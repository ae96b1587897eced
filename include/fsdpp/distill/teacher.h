#pragma once
// The frozen teacher of knowledge distillation (distillation: in the config,
// docs/distillation.md): its own models::CausalLM loaded from distillation.teacher, through
// parallel::parallelize as the student is, with a mesh and plan of its own (FULL_SHARD over
// every rank, on groups of its own, so that its collectives are counted apart from the
// student's), frozen: no gradients, no optimizer state, forward under no-grad. It only
// all-gathers: nothing it computes has a gradient, so no reduce-scatter ever runs for it.
//
//   Teacher teacher(cfg.distillation, run, world);
//   auto logits = teacher.forward(x).logits;  // the loss is the Distiller's (distiller.h)

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fsdpp/data/tokenizer.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/distill/distillation.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/models/model_source.h"
#include "fsdpp/parallel/parallelize.h"

namespace fsdpp::distill {

// Throws ConfigError naming distillation.teacher when its directory is neither kind of model, or
// its vocabulary is not `student_vocab` (naming both), or top_k is above it. Reads configs only.
models::ModelSource check_teacher_source(const DistillationSection& d, int64_t student_vocab);

// The teacher's tokenizer against the student's `tokenizer` (`how` says where the student's
// came from, e.g. "data.tokenizer=byte"): they must be the same tokenizer, not merely of the same
// vocabulary size, for the KD loss to compare the same strings. ConfigError naming both when they
// differ; a warning (returned) when the teacher's directory holds no tokenizer to compare.
std::optional<std::string> check_teacher_tokenizer(const DistillationSection& d,
                                                   const data::Tokenizer& tokenizer,
                                                   const std::string& how);

class Teacher {
 public:
  // Collective over the world: reads the teacher's config and weights, checks its vocabulary
  // against the student's (ConfigError naming both), parallelizes it.
  Teacher(const DistillationSection& d, const RunParts& run, dist::World& world);

  torch::nn::Module& module() { return lm_->module(); }
  const models::ModelSource& source() const { return source_; }
  std::string describe() const;

  // The teacher's logits (and the outputs of its layers `hidden_layers`, in hidden_states) for
  // x, under no-grad: constants for the student's loss. positions: the rows' document masking,
  // as the student's. Collective.
  models::CausalLMOutput forward(const at::Tensor& x,
                                 const std::vector<int64_t>& hidden_layers = {},
                                 const at::Tensor& positions = {});
  models::CausalLM& lm() { return *lm_; }

  // Starts a step's count of the teacher's collectives; log_step adds them to a metrics.jsonl
  // line as teacher_all_gather_bytes and teacher_reduce_scatter_bytes (this rank's).
  void begin_step();
  void log_step(nlohmann::json& line);

 private:
  models::ModelSource source_;
  std::unique_ptr<models::CausalLM> lm_;
  std::unique_ptr<parallel::Parallelized> parallel_;  // its mesh, units and record
  dist::CommCounters comm_before_;
};

}  // namespace fsdpp::distill
