#pragma once
// The distillation teacher in the estimator's ledger (private to src/estimate/): its FULL_SHARD
// shards, its forward under no-grad (one gathered unit at a time, plus the prefetched one; no
// saved activations), its logits, and the distillation loss's tensors on the student's side
// (fsdpp-train's Teacher::loss: the student's forward first, then the teacher's, then the loss).
// docs/estimate.md#distillation-teacher.

#include "fsdpp/estimate/memory_estimate.h"
#include "ledger.h"

namespace fsdpp::estimate_detail {

struct TeacherPlan {
  const ModelDescription* model = nullptr;
  int shard_world = 1;        // the data-parallel ranks: FULL_SHARD over all of them
  int64_t bytes = 4;          // its stored parameters' element bytes
  int64_t compute_bytes = 4;  // its gathered parameters', activations' and logits'
  int forward_prefetch = 0;   // units gathered ahead (fully_shard's forward_prefetch)
  std::vector<int64_t> shard; // per unit: this rank's padded elements
};
TeacherPlan plan_teacher(const EstimateOptions::Teacher& teacher, int shard_world, int forward_prefetch);

// Its shards (kept, in the Teacher category): deferred, made without storage and each rank's rows
// read from its files a chunk of at most chunk_bytes at a time; else built whole in fp32 from its
// checkpoint, each unit then cast and cut to its shard and the whole tensors freed.
void build_teacher(Ledger& l, const TeacherPlan& p, bool deferred, int64_t chunk_bytes);

// The teacher's forward on B x T tokens under no-grad; returns its logits (B·T x V, its dtype).
Id teacher_forward(Ledger& l, const TeacherPlan& p, int64_t B, int64_t T);

// The distillation objective's forward on the student's logits (elements B·T x V, `student_e`
// bytes each) and the teacher's (`teacher_logits`, freed here as Teacher::loss frees them): the
// tensors its backward needs stay in `saved` (the teacher's probabilities in the Teacher
// category).
std::vector<Id> distill_loss_forward(Ledger& l, int64_t BT, int64_t V, int64_t student_e, int64_t teacher_e,
                                     Id teacher_logits);
// Its backward down to the student's logits' gradient (returned, B·T x V fp32); frees `saved`.
Id distill_loss_backward(Ledger& l, int64_t BT, int64_t V, std::vector<Id>& saved);

}  // namespace fsdpp::estimate_detail
