#pragma once
// Dynamic loss scaling for float16 training over sharded gradients (PyTorch's
// ShardedGradScaler): the loss is multiplied by a scale so that small float16 gradients do not
// flush to zero; before the optimizer step the gradient shards are divided by it and checked
// for inf/nan. A non-finite value on any rank's shard skips the step on every rank and halves
// the scale; after growth_interval good steps the scale doubles.
//
//   fsdpp::ShardedGradScaler scaler(*model);
//   scaler.scale(loss).backward();
//   scaler.unscale_();                          // before clipping
//   fsdpp::clip_grad_norm_(*model, 1.0);
//   bool stepped = scaler.step(optimizer);      // skipped on every rank after an overflow
//   scaler.update();
//   optimizer.zero_grad();

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // false: scale() returns the loss, unscale_() and the checks do nothing, step() always steps;
  // so one code path serves float16 and the other precisions.
  bool enabled = true;
};

// What a checkpoint keeps so that a resumed run scales as the uninterrupted one.
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // good steps since the scale last changed
};

class ShardedGradScaler {
 public:
  // `root` is the module given to fully_shard last (the root unit); the verdict is agreed over
  // its mesh.
  explicit ShardedGradScaler(torch::nn::Module& root, GradScalerOptions options = {});
  // Several roots (the pipeline stages this rank holds), the verdict agreed over each group of
  // `agree_over` in turn: groups whose ranks together cover every rank that holds part of the
  // model (a mesh's dims; fsdpp::parallel passes every dim of its mesh, so pipeline, tensor and
  // expert parallel ranks skip a step together). Empty: the first root's mesh.
  ShardedGradScaler(std::vector<torch::nn::Module*> roots, GradScalerOptions options,
                    std::vector<std::shared_ptr<dist::ProcessGroup>> agree_over = {});

  at::Tensor scale(const at::Tensor& loss) const;
  // Divides this rank's gradient shards by the scale and agrees with every rank whether any
  // of them holds inf/nan (one small all-reduce). Returns true when all are finite. Once per
  // step; step() calls it when it was not called.
  bool unscale_();
  // Steps the optimizer unless a rank found a non-finite gradient; returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);
  // Adjusts the scale from this step's outcome and ends the step.
  void update();

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }
  // Whether this step's gradients were found non-finite (after unscale_()).
  bool found_inf() const { return found_inf_.value_or(false); }
  int64_t skipped_steps() const { return skipped_; }
  GradScalerState state() const { return {scale_, growth_tracker_}; }
  void load_state(const GradScalerState& s);

 private:
  std::vector<torch::nn::Module*> roots_;
  GradScalerOptions options_;
  double scale_;
  std::vector<std::shared_ptr<dist::ProcessGroup>> agree_over_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  std::optional<bool> found_inf_;  // set by unscale_() until update()
};

}  // namespace fsdpp
