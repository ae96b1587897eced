#pragma once
// The model a run trains and its data, as the phases (phases.h) ask for them: one interface,
// one implementation per kind of run, chosen once when the run's session is made.
//
//   LanguageModels  fsdpp-train's Llama and Qwen3-MoE, from the model: and data: sections
//                   (prepare_data.cpp, build_model.cpp); Trainer::run's (trainer.cpp)
//   CustomRun       train()'s CustomModel and TrainData (custom_model.cpp)
//
// The phases call through it and never ask which one they have: what only a language model has
// (a tokenizer, a sample, MFU from its FLOPs) is what its implementation gives, or leaves out.
// Private to src/train.

#include <c10/core/ScalarType.h>

#include <optional>

namespace fsdpp::train::detail {

struct TrainSession;

class RunModel {
 public:
  virtual ~RunModel() = default;

  // choose_start: the layout's checks that need the model's shape but not the model itself, after
  // the session's dims are known and before output_dir is touched (nothing, for a model whose
  // shape is known only once it is made).
  virtual void check_layout(TrainSession& s) const = 0;
  // prepare_data: the training batches (s.batches), the evaluation's source (s.eval_batches, or
  // none) and s.tokens_per_example (0: examples, not tokens).
  virtual void prepare_data(TrainSession& s) const = 0;
  // build_model: the memory check, then the model (s.lm) and the plan parallelize applies to it
  // (s.plan), each checked against the config's keys that name its parts.
  virtual void build_model(TrainSession& s) const = 0;
  // shard_model: the dtype of the root's outputs under mixed precision (empty: the compute
  // dtype).
  virtual std::optional<at::ScalarType> root_output_dtype() const = 0;
  // The training FLOPs per token for MFU on a GPU; 0: not known (no MFU is logged).
  virtual double flops_per_token(const TrainSession& s) const = 0;
};

// fsdpp-train's language models, from the config's model: and data: sections (prepare_data.cpp,
// build_model.cpp).
class LanguageModels final : public RunModel {
 public:
  void check_layout(TrainSession& s) const override;
  void prepare_data(TrainSession& s) const override;
  void build_model(TrainSession& s) const override;
  std::optional<at::ScalarType> root_output_dtype() const override { return std::nullopt; }
  double flops_per_token(const TrainSession& s) const override;
};

}  // namespace fsdpp::train::detail
