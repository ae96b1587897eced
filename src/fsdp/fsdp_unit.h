#pragma once
// One unit of FSDP: the parameters of one module that communicate together (one flat
// all-gather, one flat reduce-scatter), and the state machine that the forward wrapper and the
// autograd hooks drive:
//
//   IDLE --pre_forward--> FORWARD --post_forward--> IDLE (resharded or not, by strategy)
//   IDLE --pre_backward (a gradient reached the unit's outputs)--> PRE_BACKWARD
//   PRE_BACKWARD --post_backward (all its gradients accumulated, or the end of backward)--> IDLE
//
// The root unit (the outermost one) also owns what is per step, in its FSDPRootState
// (root_state.h): lazy initialisation, the list of units in order, the forward and backward
// orders of the last step (what prefetching follows), the end-of-backward callback that
// finishes every unit and waits for the gradient reductions, and the gradient-sync switch.
//
// Data types and places: the flat shard (the master copy the optimizer steps) keeps the
// parameters' dtype on the offload device (the CPU under OffloadPolicy, else the parameters'
// device); the all-gather runs in the mixed precision param dtype on the compute device, the
// gradient reduction in the reduce dtype there, and the reduced gradient shard comes back in
// the master dtype next to the master shard.

#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp_param.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/dist/process_group.h"
#include "fsdpp/dist/trace.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "root_state.h"

namespace fsdpp {

enum class UnitState { IDLE, FORWARD, PRE_BACKWARD };

class FSDPUnit : public torch::nn::Module {
 public:
  static constexpr const char* kChildName = "_fsdp";

  FSDPUnit(torch::nn::Module& module, const FullyShardOptions& options,
           std::vector<std::pair<std::string, at::Tensor>> params);

  // The forward wrapper (fsdpp::forward).
  void pre_forward();
  std::vector<at::Tensor> post_forward(std::vector<at::Tensor> outputs);
  void forward_failed();

  // Autograd hooks.
  void pre_backward();
  // `index`: the parameter's place in params().
  void on_grad_accumulated(size_t index);

  // Gathers the parameters (waiting for a prefetch if one is in flight) and points them at the
  // unsharded tensors.
  void unshard();
  // Issues the all-gather without waiting (a prefetch); unshard() finishes it.
  void start_unshard();
  void reshard(bool free_unsharded);
  // Held (fully_shard.h's unshard(root) .. reshard(root)): the unit stays gathered through
  // forwards and backwards, and its hooks reduce nothing: gradients accumulate unsharded until
  // reduce_held_gradients().
  void hold();
  void release();
  bool held() const { return held_; }
  void set_reshard_after_forward(bool reshard);
  // Issues the reduction of the accumulated unsharded gradients regardless of the sync switch;
  // finish_gradients() waits for it and adds the result to the shard gradients.
  void reduce_held_gradients();
  void finish_gradients();

  const std::string& name() const { return name_; }
  const std::vector<std::unique_ptr<FSDPParam>>& params() const { return params_; }
  const FullyShardOptions& options() const { return options_; }
  int shard_world() const { return shard_world_; }
  const std::shared_ptr<dist::ProcessGroup>& shard_group() const { return shard_group_; }
  const std::shared_ptr<dist::ProcessGroup>& replicate_group() const { return replicate_group_; }
  bool is_root() const { return !has_parent_; }
  // Units inside this one's module were made before it: they get a parent, stop being roots
  // and drop their root state.
  void adopt_children();
  // The state of this unit's root (its own when it is the root); see root_state.h.
  FSDPRootState& root();

  // Root only.
  const std::vector<FSDPUnit*>& all_units();
  void set_requires_gradient_sync(bool sync);
  // Every parameter at full size, by name (collective over the shard group).
  std::vector<std::pair<std::string, at::Tensor>> full_parameters();
  // The public view of this unit's parameters (sharded_param.cpp).
  std::vector<ShardedParam> sharded_params() const;
  // Bytes of unsharded parameter storage this unit holds right now.
  int64_t unsharded_bytes() const;
  int64_t shard_numel() const { return total_shard_numel_; }
  bool gather_in_flight() const { return pending_gather_.has_value(); }
  at::Tensor cast_forward_input(const at::Tensor& t) const;
  // Made of parameters on the meta device: its shards have no storage yet.
  bool on_meta() const { return flat_shard_.defined() && flat_shard_.is_meta(); }
  // Gives the shards of a unit on_meta() storage on `device` (zeros), as its parameters would
  // have had there; a no-op for a unit that has storage (deferred_init.h).
  void to_empty(at::Device device);

 private:
  friend class FSDPRootState;  // initialises the units and finishes their backward

  // Backward (fsdp_unit_backward.cpp).
  // Registers the hook that counts the parameter's accumulated gradients.
  void watch_gradient(size_t index);
  // The forward outputs that need a gradient, wrapped so that backward reaches pre_backward().
  std::vector<at::Tensor> hook_outputs(std::vector<at::Tensor> outputs);
  void post_backward();
  // The hooks' reduction: nothing while the sync switch is off or the unit is held.
  void reduce_gradients();
  void issue_reduce();
  // One rank, no replicas, no dtype or device change, no division: the gradients are already
  // what the reduction would give.
  bool gradients_pass_through() const;
  void pass_gradients_through();

  // The flat shard and each parameter's views into it, on flat_options' device (or the CPU
  // under offload); take_values: from the parameters' current data, else zeros.
  void allocate_shards(const at::TensorOptions& flat_options, bool take_values);
  bool reshard_after_forward() const;
  // Reduce buckets (FullyShardOptions::reduce_bucket_size): consecutive parameters, built from
  // the unit's last, so that the order autograd computes gradients in (roughly the reverse of
  // the forward's) fills them one after another.
  void plan_reduce_buckets();
  // Issues, in bucket order, every bucket whose gradients have all been accumulated, but never
  // the last: post_backward() issues that one, after its prefetch.
  void issue_ready_buckets();
  void issue_bucket(size_t b);
  bool keep_unsharded_between_steps() const;
  bool gathered_current() const;
  void finish_unshard();
  void drop_prefetch();
  at::Tensor gather_input() const;
  dist::CollectiveTag tag() const { return {name_}; }
  // The timeline recorder, reached through the unit's groups (null: none); see trace.h.
  dist::TraceRecorder* trace() const { return options_.mesh->group(0)->trace().get(); }
  // Now when a profiled step is being recorded, else the epoch (nothing to record at the end).
  dist::TraceRecorder::Clock::time_point trace_begin() const;
  void trace_end(const char* what, dist::TraceRecorder::Clock::time_point begin) const;

  torch::nn::Module* module_;  // owns this unit as its child kChildName
  FullyShardOptions options_;
  std::string name_;
  std::vector<std::unique_ptr<FSDPParam>> params_;
  int64_t total_shard_numel_ = 0;
  int64_t num_trainable_ = 0;
  at::Tensor flat_shard_;
  std::shared_ptr<dist::ProcessGroup> shard_group_;      // null when shard_world_ == 1
  std::shared_ptr<dist::ProcessGroup> replicate_group_;  // null when not replicated
  int shard_world_ = 1;
  int shard_rank_ = 0;
  double divide_factor_ = 1;
  double predivide_factor_ = 1;  // applied before a float16 reduction, so its sum cannot overflow
  at::ScalarType param_dtype_ = at::kFloat;   // of the gathered parameters
  at::ScalarType reduce_dtype_ = at::kFloat;  // of the gradient reduction
  at::Device compute_device_ = at::kCPU;
  bool separate_unsharded_ = false;  // the unsharded parameters need storage of their own

  UnitState state_ = UnitState::IDLE;
  bool sharded_ = true;           // parameters point at their shards
  bool held_ = false;             // gathered until release(), see hold()
  bool gathered_valid_ = false;   // `unsharded` holds the current values (ZERO1 keeps them)
  std::vector<int64_t> gathered_versions_;
  int64_t grads_ready_ = 0;
  std::optional<bool> reshard_after_forward_;  // set_reshard_after_forward(); else the strategy's

  struct ReduceBucket {
    size_t first = 0, end = 0;   // params_[first, end)
    int64_t begin = 0, numel = 0;  // columns of the flat shard
    int64_t trainable = 0;       // parameters that get a gradient
    int64_t ready = 0;           // of those, accumulated in this backward
  };
  std::vector<ReduceBucket> buckets_;  // in issue order; one covering the unit when unbucketed
  std::vector<size_t> bucket_of_;      // params_ index -> buckets_ index
  size_t next_bucket_ = 0;             // buckets_[0, next_bucket_) are in pending_

  struct PendingReduce {
    std::vector<dist::Work> works;
    at::Tensor output;  // (total_shard_numel) summed gradient shard, bucket by bucket
  };
  std::optional<PendingReduce> pending_;
  struct PendingGather {
    dist::Work work;
    at::Tensor gathered;  // (shard_world * total_shard_numel) in param dtype
    at::Tensor input;     // kept alive until the collective is done
    dist::Event copied_in;  // one rank, no collective: the copy-in's end on the copy-in stream
  };
  // The gather's buffers, kept by the root's comm context until their last reader is done.
  void retire(PendingGather& g);
  std::optional<PendingGather> pending_gather_;
  // One rank: the parameters point into the converted shard (no copy-out), which the unit holds
  // while they are unsharded and retires when it frees them.
  bool can_alias(const PendingGather& g) const;
  void release_alias();
  std::optional<PendingGather> aliased_;

  // Tree.
  bool has_parent_ = false;
  FSDPRootState* root_ = nullptr;  // set by the root's lazy_init
  std::unique_ptr<FSDPRootState> root_state_;  // while this unit is a root
  // When this unit's forward / backward began, for its trace event.
  dist::TraceRecorder::Clock::time_point forward_began_{}, backward_began_{};
};

// The unit a module was made into, or nullptr.
FSDPUnit* find_unit(torch::nn::Module& module);

}  // namespace fsdpp
