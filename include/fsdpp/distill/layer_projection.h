#pragma once
// distillation.layer_projection (docs/distillation.md#intermediate-layers): the learned linear
// maps from the student's hidden width to the teacher's, one per layer_map pair, that the layer
// loss sends the student's states through (layer_distill_loss.h), as NVIDIA Minitron and Model
// Optimizer do for width-pruned students.
//
// They are trained with the student, outside it: replicated whole on every rank (not in any
// FSDP unit, nor in the student's state dict or Hugging Face export), their gradients averaged
// over the ranks (as FSDP averages the student's), stepped by the run's optimizer (make_optimizer
// adds them as a param group), clipped with the student under one global norm (train_step), and
// saved in every checkpoint as kProjectionFile beside the student's state (weights, and their
// AdamW state unless training.save_only_model).
//
//   LayerProjections p(mode, pairs, 32, 64, seed, device);
//   loss = layer_distillation_loss(hs, ht, mask, type, p.weights());
//   p.average_gradients(*world.group());          // after the step's backward passes
//   checkpointer.add_files({{kProjectionFile, p.serialize(&opt)}});
//   if (auto warning = p.restore(dir, &opt)) say(*warning);   // on resume

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/dist/process_group.h"
#include "fsdpp/config/choice.h"
#include "fsdpp/distill/layer_distill_loss.h"

namespace fsdpp::distill {

inline constexpr const char* kProjectionFile = "distill_projection.pt";

class LayerProjections {
 public:
  // One (teacher_width, student_width) weight per pair under `linear`, or under `auto` when
  // the widths differ; none otherwise. `none` with different widths is a ConfigError naming
  // the key. Initialised as torch.nn.Linear's (uniform in +-1/sqrt(student_width)), drawn in
  // pair order from a generator of their own seeded with `seed`: the same on every rank and at
  // any world size, and the run's other draws are not moved.
  LayerProjections(config::Choice<LayerProjection> mode, std::vector<std::pair<int64_t, int64_t>> pairs,
                   int64_t student_width, int64_t teacher_width, uint64_t seed, at::Device device);

  // Per pair: its weight (requires grad), or undefined (compared as they are).
  const std::vector<at::Tensor>& weights() const { return weights_; }
  // The defined weights, for the optimizer; empty when no pair has one.
  std::vector<at::Tensor> parameters() const;
  std::string describe() const;  // "2 x (64, 32)", or "" without any

  // Collective over `group`: every weight's gradient averaged over its ranks (the same
  // gradients as one process over their batches together). A no-op without weights.
  void average_gradients(dist::ProcessGroup& group) const;

  // The checkpoint file's bytes: each weight and (with `opt`, once it has stepped them) its
  // AdamW state and step, under "<S>_<T>_weight", "<S>_<T>_exp_avg", ... for pair S:T.
  std::string serialize(torch::optim::Optimizer* opt) const;
  // Reads `dir`/kProjectionFile into the weights and (with `opt`, when the file has it) their
  // AdamW state, all checked before anything changes. When the file is missing (a checkpoint
  // of a run without projections: a second phase that adds a teacher, or an older version),
  // lacks one of this run's pairs (another layer_map) or holds another shape (another width),
  // nothing changes and it returns the warning to print: the projections then start from
  // their seeded values, as a new teacher's loss starts afresh (the checkpointer's warning for
  // a changed teacher says the same of the loss). CheckpointError for a file that is not one.
  std::optional<std::string> restore(const std::filesystem::path& dir,
                                     torch::optim::Optimizer* opt) const;

 private:
  std::vector<std::pair<int64_t, int64_t>> pairs_;
  std::vector<at::Tensor> weights_;
};

}  // namespace fsdpp::distill
