// What the estimate reports of a played step. See estimate_report.h.
#include "estimate_report.h"

#include <fmt/format.h>

#include <algorithm>

namespace fsdpp::estimate_detail {
namespace {

// The layout's notes: tensor parallelism and the experts' place.
void layout_notes(MemoryEstimate& e, const EstimateOptions& o, const DataParallelLayout& a, const MoeDims& md) {
  const auto& shape = a.model.shape;
  const bool have_shape = shape.has_value();
  const int tp = a.tp, ep = a.ep;
  if (tp > 1)
    e.notes.push_back(fmt::format("tensor parallel {}{}: the {} plan's slices (the largest rank's), FSDP over {} "
                                  "data-parallel ranks", tp, o.sequence_parallel ? " with sequence parallelism" : "",
                                  have_shape ? shape->architecture() : "model's", a.dp_world));
  const bool experts_apart =
      e.expert_shard_world != a.shard_world || ep > 1 || (tp > 1 && !a.split_experts);
  if (have_shape && shape->moe)
    e.notes.push_back(fmt::format(
        "Qwen3-MoE: routing taken as balanced (each of the {} experts gets N k / E of the top-{} rows){}{}", md.E,
        md.k, tp > 1 ? (a.split_experts ? "; experts split over tp" : "; experts whole, each tp rank routing its chunk")
                     : "",
        experts_apart ? fmt::format("; experts {} over ep {}, FSDP over efsdp = {} ranks for them{}",
                                    ep > 1 ? "split" : "whole", ep, e.expert_shard_world,
                                    a.traits->hybrid ? fmt::format(", replicated over {} replicas", a.dims.dp_replicate)
                                                     : "")
                      : ""));
  if (tp > 1 && !have_shape) e.notes.push_back("tensor parallel on a parameter count: every parameter divided by the degree");
}

}  // namespace

void report_peak(MemoryEstimate& e, const Ledger& l, const std::array<bool, kNumCats>& on_device, bool heap,
                 bool offload, const EstimateOptions& o) {
  auto p = l.at_peak();
  for (int c = 0; c < kNumCats; ++c) {
    if (!on_device[c]) p[c] = 0;  // offloaded: on the host, reported in e.host
  }
  e.parameters = p[kParams];
  e.gradients = p[kGradWork] + p[kGradShards];
  e.optimizer_state = p[kOptim];
  e.unsharded = p[kUnsharded];
  e.activations = p[kActs];
  e.teacher = p[kTeacher];
  e.tensors = l.peak();
  e.allocator = heap ? std::max<int64_t>(0, l.resident_peak() - l.peak()) : 0;
  e.runtime = o.runtime_baseline_bytes;
  e.total = e.tensors + e.allocator + e.runtime;
  e.host = offload ? l.host_peak() : 0;
  e.peak_at = l.peak_where();
}

void report_notes(MemoryEstimate& e, const EstimateOptions& o, const DataParallelLayout& a, const MoeDims& md) {
  const auto& shape = a.model.shape;
  const bool have_shape = shape.has_value();
  if (!have_shape) e.notes.push_back("activations not estimated: the model was given as a parameter count");
  if (o.param_dtype != EstimateDType::FP32)
    e.notes.push_back("mixed precision: bf16/fp16 gathers and compute, fp32 master shards");
  if (o.activation_checkpointing)  // the model's own unit class, as fsdp_transformer_layer_cls_to_wrap names it
    e.notes.push_back(fmt::format("activation checkpointing per {}",
                                  !have_shape   ? "unit"
                                  : shape->moe ? "Qwen3MoeDecoderLayer"
                                               : "TransformerBlock"));
  if (o.teacher)
    e.notes.push_back(fmt::format("distillation teacher: {:.2f} M parameters in {}, FULL_SHARD over {} rank(s), "
                                  "forward under no-grad after the student's, its logits and probabilities in fp32{}",
                                  o.teacher->model.num_params() / 1e6, to_string(o.teacher->dtype), o.world_size,
                                  a.tp > 1 ? "; the objective on this rank's vocabulary columns" : ""));
  layout_notes(e, o, a, md);
  if (o.optimizer_state_on_disk)
    e.notes.push_back("optimizer state in memory-mapped files: one parameter's state in memory at a time, during "
                      "its update (its pages stay in the page cache, which the kernel reclaims)");
  if (o.cpu_offload && !o.device_is_gpu)
    e.notes.push_back("CPU offload on a CPU device moves nothing: everything is host memory already");
  if (!o.device_is_gpu && o.mmap_threshold <= 0)
    e.notes.push_back("glibc's default (dynamic) mmap threshold: its heap keeps more than modelled, measured "
                      "up to ~25% more RSS; MALLOC_MMAP_THRESHOLD_=65536 makes RSS follow the live tensors");
}

}  // namespace fsdpp::estimate_detail
