#include "fsdpp/estimate/memory_estimate.h"

#include <array>
#include <optional>

#include "build_ledger.h"
#include "estimate_layout.h"
#include "estimate_report.h"
#include "layer_runs.h"
#include "pipeline_estimate.h"
#include "step_ledger.h"

namespace fsdpp {
namespace {

using namespace estimate_detail;

// On the CPU every tensor comes from glibc's malloc (see HeapModel).
std::optional<HeapModel> heap_model(const EstimateOptions& o) {
  if (o.device_is_gpu) return std::nullopt;
  if (o.mmap_threshold > 0) return HeapModel(o.mmap_threshold, /*fixed=*/true);
  return HeapModel(HeapModel::kInitialThreshold, /*fixed=*/false);
}

// What every rank allocates before its first step: the model (built whole or deferred) down to
// its shards, the teacher's, and the buffers.
void before_first_step(Ledger& l, const ModelDescription& whole, const DataParallelLayout& a,
                       const std::vector<UnitState>& us, const TeacherPlan* teacher, const EstimateOptions& o) {
  std::vector<int64_t> flat_shards;
  for (const auto& u : us) flat_shards.push_back(u.shard);
  if (o.deferred_init) {
    deferred_init_ledger(l, whole, flat_shards, a.tp, o.init_chunk_bytes);
  } else {
    build_model_ledger(l, whole, a.pre_ep, a.model, flat_shards, a.tp);
  }
  if (teacher) build_teacher(l, *teacher, o.deferred_init, o.init_chunk_bytes);
  l.at("start of the step");
  // Buffers: every attention layer's rotary cos and sin tables, (max_seq_len, head_dim / 2) fp32.
  const int64_t f32 = 4;
  if (a.model.shape && !a.model.shape->qk_norm) {  // Qwen3 makes its tables in each forward
    const auto& sh = *a.model.shape;
    const int64_t rows = sh.max_seq_len > 0 ? sh.max_seq_len : o.seq_len;
    for (int64_t i = 0; i < 2 * sh.n_layers; ++i) l.alloc(kParams, rows * (sh.head_dim() / 2) * f32);
  }
  // Mixed precision without sharding: the low-precision copy of the parameters compute uses.
  if (o.param_dtype != EstimateDType::FP32 && a.shard_world <= 1)
    l.alloc(kUnsharded, a.model.num_params() * dtype_bytes(o.param_dtype));
}

// Every tensor of three steps through the ledger: a cost that grows with the layers, which
// estimate_memory avoids for long decoders (layer_runs.h).
MemoryEstimate estimate_every_layer(const ModelDescription& whole, const EstimateOptions& o) {
  check_tensor_parallel(whole, o);
  if (o.pipeline.degree > 1) return estimate_pipeline(whole, o);
  const DataParallelLayout a = data_parallel_layout(whole, o);
  // The teacher: FULL_SHARD over the whole world whatever the student's strategy (under tensor
  // parallelism every rank runs it whole on its tp group's batch, and the objective takes this
  // rank's vocabulary columns of its logits: distill_loss_forward at d.V, this rank's share).
  std::optional<TeacherPlan> teacher;
  if (o.teacher) teacher = plan_teacher(*o.teacher, o.world_size, o.forward_prefetch);
  const bool offload = o.cpu_offload && o.device_is_gpu;
  std::array<bool, kNumCats> on_device{};
  on_device.fill(true);
  if (offload) on_device[kParams] = on_device[kGradShards] = on_device[kOptim] = false;

  MemoryEstimate e;
  e.shard_world = a.shard_world;
  e.expert_shard_world = a.expert_shard_world;
  const int64_t optim_bytes = o.optimizer_state_on_disk ? 0 : estimated_optimizer(o.optimizer).states() * 4;
  std::vector<UnitState> us = unit_states(a);
  e.model_states = model_states(a, us, optim_bytes);
  e.held = held_between_steps(a, us, dtype_bytes(o.reduce_dtype), optim_bytes);

  std::optional<HeapModel> heap = heap_model(o);
  Ledger l(on_device, heap ? &*heap : nullptr);
  before_first_step(l, whole, a, us, teacher ? &*teacher : nullptr, o);
  FsdpUnits units(l, a, us,
                  {.keep_unsharded = a.traits->keep_unsharded_between_steps,
                   .mixed_precision = o.param_dtype != EstimateDType::FP32,
                   .offload = offload,
                   .param_bytes = dtype_bytes(o.param_dtype),
                   .reduce_bytes = dtype_bytes(o.reduce_dtype),
                   .limit_all_gathers = o.limit_all_gathers});
  StepLedger step(l, o, a, units, us, teacher ? &*teacher : nullptr);
  // Two steps reach the steady state; the third lets the heap settle after the first step's
  // optimizer state took memory that the activations had used.
  for (int k = 0; k < 3; ++k) step.run(k == 0);

  report_peak(e, l, on_device, heap.has_value(), offload, o);
  report_notes(e, o, a, step.moe());
  return e;
}

}  // namespace

MemoryEstimate estimate_memory(const ModelDescription& model, const EstimateOptions& o) {
  if (auto e = estimate_from_layer_runs(model, o, estimate_every_layer)) return *std::move(e);
  return estimate_every_layer(model, o);
}

}  // namespace fsdpp
