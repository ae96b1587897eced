#pragma once
// The `distillation:` section of fsdpp-train's config (docs/distillation.md): knowledge
// distillation from a frozen teacher, off while `teacher` (and `teacher_cache`) is empty. Names
// as torchtune's KD recipe (kd_ratio, temperature), TRL's GKD (beta, top_k, lmbda, seq_kd) and
// fsdpp's losses (distill_loss.h) spell them. train::TrainConfig holds one and reads its keys;
// the distiller (distiller.h) is built from it and the parts of the run it needs (RunParts).
//
//   distill::DistillationSection d;
//   d.teacher = "runs/teacher/checkpoint-100";
//   d.validate({.seq_len = 128});   // ConfigError naming the key
//   distill::Distiller distiller(d, run, world, student);

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fsdpp/config/choice.h"
#include "fsdpp/distill/distill_loss.h"
#include "fsdpp/distill/layer_distill_loss.h"

namespace fsdpp::distill {

// distillation.teacher_dtype: the dtype the teacher's parameters are stored (and computed) in.
enum class TeacherDtype { FLOAT32, BFLOAT16 };

}  // namespace fsdpp::distill

namespace fsdpp::config {

template <>
struct ChoiceNames<distill::TeacherDtype> {
  static constexpr std::string_view kWhat = "teacher dtype";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<distill::TeacherDtype, std::string_view>, 2> kNames{{
      {distill::TeacherDtype::FLOAT32, "float32"},
      {distill::TeacherDtype::BFLOAT16, "bfloat16"},
  }};
};

}  // namespace fsdpp::config

namespace fsdpp::distill {

// What the section's checks read of the rest of the run's config: the keys distillation
// combines with, named in the messages by their fsdpp-train keys.
struct RunShape {
  int64_t seq_len = 128;            // data.seq_len
  int64_t tensor_parallel = 1;      // parallelism.tensor_parallel_degree
  bool sequence_parallel = false;   // parallelism.enable_sequence_parallel
  int64_t pipeline_parallel = 1;    // parallelism.pipeline_parallel_degree
};

// What the distiller and its teacher take of the run besides their section
// (train::TrainConfig::distill_run makes it from fsdpp-train's config).
struct RunParts {
  int64_t student_vocab = 0;  // the width of the student's logits, which the teacher must share
  int64_t seq_len = 128;      // data.seq_len: the rows' tokens (the cache's windows, the samples')
  uint64_t seed = 42;         // training.seed: the samples' generators, the projections' values
  std::string init_from;      // model.init_from: its compress.json gives layer_map [auto]
  // model.deferred_init (not off): the teacher is made without storage and each rank reads its
  // shards' rows only; otherwise built whole and loaded before sharding.
  bool deferred_init = true;
  bool limit_all_gathers = true;  // training.fsdp_config.limit_all_gathers, for its units too
};

struct DistillationSection {
  // An fsdpp checkpoint directory (any layout) or a Hugging Face model directory, of a Llama or
  // a Qwen3-MoE with the student's vocabulary; its config.json / model_config.json gives its shape.
  std::string teacher;
  config::Choice<DistillLossType> loss = DistillLossType::FORWARD_KL;
  double beta = 0.5;         // generalized_jsd: the teacher's weight in the mixture, in [0, 1]
  double temperature = 1.0;  // logits / T, the divergence times T^2
  double kd_ratio = 0.5;     // (1 - kd_ratio) * cross-entropy + kd_ratio * KD
  int64_t top_k = 0;         // > 0: both distributions over the teacher's k most likely tokens
  config::Choice<TeacherDtype> teacher_dtype = TeacherDtype::FLOAT32;  // the teacher's stored parameters
  // An offline teacher (fsdpp-train teacher-logits, teacher_cache.h): data batches read its
  // top-K log-probabilities instead of running it.
  std::string teacher_cache;
  // On-policy (TRL's GKD names): the share of accumulation batches whose continuations the student
  // samples and the teacher scores; seq_kd: the teacher samples the others.
  double lmbda = 0;
  bool seq_kd = false;
  int64_t max_new_tokens = 32;          // tokens sampled after each window's prompt
  double generation_temperature = 1.0;  // the sampling temperature (not the loss's)
  // Intermediate layers: "S:T" pairs, the student's layer S pulled towards the teacher's layer
  // T; [auto]: the layers model.init_from's compress.json kept.
  std::vector<std::string> layer_map;
  config::Choice<LayerLossType> layer_loss = LayerLossType::COSINE;
  // A learned linear map from the student's width to the teacher's per pair (layer_projection.h):
  // auto where the widths differ, linear always, none never.
  config::Choice<LayerProjection> layer_projection = LayerProjection::AUTO;
  double layer_loss_weight = 1.0;
  int64_t loss_chunk_tokens = 0;  // positions per chunk of the KD loss; 0: 64 MiB of probabilities

  bool enabled() const { return !teacher.empty() || !teacher_cache.empty(); }
  // The teacher model is loaded: without a cache, or for what a cache cannot give (samples to
  // score, hidden states).
  bool live_teacher() const {
    return !teacher.empty() && (teacher_cache.empty() || lmbda > 0 || seq_kd || !layer_map.empty());
  }
  // The section's ranges and its combinations with the rest of the run (distillation.cpp):
  // ConfigErrors naming the keys and what is accepted.
  void validate(const RunShape& run) const;
};

// distillation.layer_map's "S:T" pairs in order; empty for [auto] (resolved by the distiller from
// model.init_from's compress.json) and for no map. ConfigError for anything else.
std::vector<std::pair<int64_t, int64_t>> parse_layer_map(const std::vector<std::string>& map);

}  // namespace fsdpp::distill
