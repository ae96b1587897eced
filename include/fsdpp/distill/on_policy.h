#pragma once
// On-policy distillation (distillation.lmbda, seq_kd; TRL's GKDTrainer, Agarwal et al.,
// "On-Policy Distillation of Language Models", 2306.13649): which sequences an accumulation batch trains
// on, and making them.
//
//   OnPolicy policy(cfg.distillation, cfg.training.seed, cfg.data.seq_len);
//   switch (policy.source(step, micro)) { ... }         // the same on every rank
//   auto batch = policy.sample(student, source, x, y, starts, step);  // collective
//
// A window of seq_len + 1 tokens keeps its first seq_len + 1 - max_new_tokens as the prompt;
// the model samples the other max_new_tokens (temperature generation_temperature, the whole
// vocabulary, a KV cache). The KD loss is over the positions that predict sampled tokens; the
// cross-entropy over the prompt's real next tokens, and over the sampled ones too when the
// teacher sampled them (seq_kd: Kim & Rush's sequence-level KD), never over the student's own.
// Each row is sampled with a generator of its own, seeded by (training.seed, step, the window's
// offset), so the samples do not depend on the batch, the rank or the world size.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "fsdpp/models/causal_lm.h"
#include "fsdpp/distill/distillation.h"

namespace fsdpp::distill {

enum class BatchSource { DATA, STUDENT, TEACHER };
std::string_view to_string(BatchSource s);

// Continues a (B, P) prompt to (B, T + 1) tokens as models::CausalLM::generate does, the same
// tokens on every rank: a model's generate, or a pipelined student's through its stages
// (pipeline_step.h's pipeline_generate). Collective.
using Sampler = std::function<at::Tensor(const at::Tensor& prompt, const models::GenerateOptions&)>;

struct PolicyBatch {
  at::Tensor inputs, targets;  // (B, T): targets -100 where the cross-entropy is left out
  at::Tensor kd_mask;          // (B, T) bool: where the KD loss is taken
  BatchSource source = BatchSource::DATA;
};

class OnPolicy {
 public:
  OnPolicy(const DistillationSection& d, uint64_t seed, int64_t seq_len);

  bool active() const { return lmbda_ > 0 || seq_kd_; }
  // STUDENT with probability lmbda, else TEACHER under seq_kd, else DATA: a function of
  // (training.seed, step, micro) alone, so every rank agrees without communicating.
  BatchSource source(int64_t step, int64_t micro) const;

  // The data batch as it is (source DATA): KD and cross-entropy over every labelled position.
  PolicyBatch data(const at::Tensor& x, const at::Tensor& y) const;
  // `generate` (the student, or the teacher under seq_kd) continues each window's prompt;
  // every rank calls it together (the model's units gather in each forward). window_starts: the
  // windows' offsets in the training split (BatchLoader::next_batch).
  PolicyBatch sample(const Sampler& generate, BatchSource source, const at::Tensor& x,
                     const at::Tensor& y, const std::vector<int64_t>& window_starts,
                     int64_t step) const;
  PolicyBatch sample(models::CausalLM& model, BatchSource source, const at::Tensor& x,
                     const at::Tensor& y, const std::vector<int64_t>& window_starts,
                     int64_t step) const {
    const Sampler generate = [&model](const at::Tensor& p, const models::GenerateOptions& o) {
      return model.generate(p, o);
    };
    return sample(generate, source, x, y, window_starts, step);
  }

 private:
  double lmbda_;
  bool seq_kd_;
  int64_t max_new_tokens_;
  double temperature_;
  uint64_t seed_;
  int64_t seq_len_;
};

}  // namespace fsdpp::distill
