#pragma once
// A distilling run's rows and objective, accumulation batch by accumulation batch (docs/distillation.md): where the
// sequences come from (the data, or sampled by the student or the teacher: on_policy.h), what
// the teacher says about them (the live teacher, teacher.h, or the offline cache,
// teacher_cache.h), the chunked KD loss (chunked_distill_loss.h), the intermediate layers'
// loss (layer_distill_loss.h, through layer_projection.h's learned maps) and the step's
// metrics. Built from its section (distillation.h) and the parts of the run it needs; the
// trainer holds one and calls it each step.
//
//   Distiller distiller(cfg.distillation, cfg.distill_run(vocab), world, *lm);  // collective
//   distiller.begin_step();
//   auto rows = distiller.rows(accumulation_batches, positions, step, sampler, accum, false, true);
//   parallelized.forward_backward(rows.inputs, rows.targets, rows.positions, 1.0,
//                                 {rows.objective, rows.hidden_layers});
//   distiller.log_step(line, world);

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fsdpp/data/batch_loader.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/distill/distill_loss.h"
#include "fsdpp/distill/distillation.h"
#include "fsdpp/distill/layer_projection.h"
#include "fsdpp/distill/on_policy.h"
#include "fsdpp/distill/teacher.h"
#include "fsdpp/distill/teacher_cache.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/parallel/parallelize.h"
#include "fsdpp/tp/regions.h"

namespace fsdpp::distill {

// distillation.layer_map as (student layer, teacher layer) pairs: its "S:T" items, or for
// [auto] the layers `init_from`'s compress.json kept (student i <- teacher kept[i]; init_from
// is model.init_from). ConfigError naming the key for layers out of range or [auto] without
// compress.json.
std::vector<std::pair<int64_t, int64_t>> resolve_layer_map(const DistillationSection& d,
                                                           const std::string& init_from,
                                                           int64_t student_layers,
                                                           int64_t teacher_layers);

class Distiller {
 public:
  // Collective over the world: the live teacher when the section needs one, the cache when it
  // names one (its vocabulary and seq_len checked against the run's), the layer pairs.
  Distiller(const DistillationSection& d, const RunParts& run, dist::World& world,
            models::CausalLM& student);

  // The step's rows and the distillation objective of each of its microbatches, for
  // parallel::Parallelized::forward_backward: the step's accumulation batches
  // (`accumulation_batches`, each a data batch of the same rows) in order. Each accumulation batch's source
  // (on_policy.h, the same on every rank) decides its rows first: the data, or sequences
  // `student` samples (every rank takes part) or the teacher samples (seq_kd). Collective.
  //  - One stage (not `pipelined`, `microbatches` the accumulation batches): accumulation batch k's
  //    objective asks the teacher about its rows when it runs, one accumulation batch's logits held at
  //    a time (the live teacher's forward is collective, and every rank runs every objective);
  //    with distillation.layer_map it reads the student's hidden_layers too.
  //  - A pipeline, split into `microbatches` of its own: the teacher's side of every row
  //    before it runs (the cache is read only where `last_stage`, this rank holds the last
  //    stage, and the objective is given only there). The objective of pipeline microbatch k
  //    weighs each part of an accumulation batch by its share of that accumulation batch's kept positions:
  //    the step's loss is the mean over the accumulation batches of their objectives however the
  //    pipeline's microbatches cut them.
  //  Each objective's cross-entropy, and its KD loss on the data's rows (whose KD positions are
  //  the cross-entropy's), is a sum over forward_backward's divisor: the global batch's token
  //  mean; the KD loss of sampled rows stays the mean over its accumulation batch's KD positions.
  //  `positions`: each accumulation batch's token positions (document masking, data.padding_free), or
  //  undefined ones; the live teacher gets them too. ConfigError with distillation.teacher_cache
  //  (its logits were computed without the masks) and with on-policy rows (distillation.lmbda,
  //  seq_kd: sampled continuations are not packed documents).
  struct StepRows {
    at::Tensor inputs, targets;               // the step's rows (B x accumulation batches, T)
    parallel::MicrobatchObjective objective;  // empty on the ranks without the last stage
    std::vector<int64_t> hidden_layers;       // the student's layers it reads (layer_map)
    at::Tensor positions;                     // the rows' token positions, or undefined
  };
  StepRows rows(const std::vector<data::BatchLoader::Batch>& accumulation_batches,
                const std::vector<at::Tensor>& positions, int64_t step, const Sampler& student,
                int microbatches, bool pipelined, bool last_stage);

  // A tensor-parallel student: its logits are this rank's columns of the vocabulary
  // (tp::shard_range over `group`), and the loss is vocab_parallel_distillation_objective over
  // them and the same columns of the teacher's: no rank gathers the whole vocabulary. Without
  // this call the student's logits are whole and the loss is chunked (chunked_distill_loss.h).
  void shard_vocabulary(tp::GroupPtr group);

  void begin_step();
  // metrics.jsonl: kd_loss, ce_loss (and layer_loss) averaged over the accumulation batches every rank
  // computed them for (pipelined: the last stage's ranks), sampled batches, generate_ms, the
  // teacher's collectives (this rank's). Collective.
  void log_step(nlohmann::json& line, dist::World& world);
  std::string describe() const;
  Teacher* live_teacher() { return teacher_.get(); }  // null with an offline cache alone
  // The intermediate layers' learned projections (layer_projection.h); null without
  // distillation.layer_map. Trained with the student: make_optimizer, train_step, save, restore.
  const LayerProjections* projections() const { return projections_ ? &*projections_ : nullptr; }

 private:
  TeacherTargets cached_teacher(const data::BatchLoader::Batch& batch) const;
  // Accumulation batch `micro`'s sequences: the data's, or sampled by the student (`student`) or the
  // teacher as its source says; the sampled batches and their time counted. Collective.
  PolicyBatch policy_batch(const Sampler& student, const data::BatchLoader::Batch& batch,
                           int64_t step, int64_t micro);
  // rows()' two cases, given the accumulation batches' sampled rows.
  StepRows stage_rows(const std::vector<data::BatchLoader::Batch>& accumulation_batches,
                      std::vector<PolicyBatch> batches, const std::vector<at::Tensor>& positions);
  StepRows pipeline_rows(const std::vector<data::BatchLoader::Batch>& accumulation_batches,
                         std::vector<PolicyBatch> batches, const std::vector<at::Tensor>& positions,
                         int microbatches, bool last_stage);
  // ConfigError for document masking with what does not support it (rows()).
  void check_positions(const std::vector<at::Tensor>& positions) const;
  // The distillation objective of the student's logits (this rank's columns under tp) against
  // the teacher's, its means over `divisors` where they are set.
  DistillObjective objective(const at::Tensor& logits, const TeacherTargets& teacher,
                             const PolicyBatch& batch, const TokenDivisors& divisors) const;

  std::unique_ptr<Teacher> teacher_;    // live; null with a cache alone
  std::optional<TeacherCache> cache_;
  OnPolicy policy_;
  DistillLossOptions options_;
  double kd_ratio_ = 0, layer_weight_ = 0;
  config::Choice<LayerLossType> layer_loss_ = LayerLossType::COSINE;
  int64_t chunk_ = 0, seq_len_ = 0, vocab_ = 0;
  tp::GroupPtr tp_group_;  // shard_vocabulary's; null: whole logits
  tp::ShardRange columns_;
  std::vector<int64_t> student_layers_, teacher_layers_;
  std::optional<LayerProjections> projections_;
  // This step's sums.
  double kd_sum_ = 0, ce_sum_ = 0, layer_sum_ = 0, generate_ms_ = 0;
  double objectives_ = 0;  // accumulation batches in the sums (pipelined: in parts)
  int64_t student_sampled_ = 0, teacher_sampled_ = 0;
};

}  // namespace fsdpp::distill
