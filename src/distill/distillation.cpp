// The distillation: section's checks (distillation.h): ranges named by their keys with what is
// accepted, and what distillation does not combine with.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/distill/distillation.h"

namespace fsdpp::distill {
namespace {

template <typename... Args>
void check(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) throw ConfigError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace

void DistillationSection::validate(const RunShape& run) const {
  const auto& d = *this;
  check(d.beta >= 0 && d.beta <= 1,
        "[config] distillation.beta={}: expected a number in [0, 1] (generalized_jsd's weight of "
        "the teacher; 0 is forward_kl, 1 is reverse_kl)",
        d.beta);
  check(d.temperature > 0 && std::isfinite(d.temperature),
        "[config] distillation.temperature={}: expected a finite number > 0 (1: the logits as "
        "they are)",
        d.temperature);
  check(d.kd_ratio >= 0 && d.kd_ratio <= 1,
        "[config] distillation.kd_ratio={}: expected a number in [0, 1], the weight of the KD "
        "loss against the cross-entropy ((1 - kd_ratio) * ce + kd_ratio * kd)",
        d.kd_ratio);
  check(d.top_k >= 0,
        "[config] distillation.top_k={}: expected >= 0 (0: the whole vocabulary; k: the "
        "teacher's k most likely tokens)",
        d.top_k);
  check(d.lmbda >= 0 && d.lmbda <= 1,
        "[config] distillation.lmbda={}: expected a number in [0, 1], the share of batches the "
        "student samples (0: off-policy only, 1: every batch on-policy)",
        d.lmbda);
  check(d.generation_temperature > 0 && std::isfinite(d.generation_temperature),
        "[config] distillation.generation_temperature={}: expected a finite number > 0 (the "
        "student's or the teacher's sampling temperature)",
        d.generation_temperature);
  const bool sampling = d.lmbda > 0 || d.seq_kd;
  check(!sampling || (d.max_new_tokens >= 1 && d.max_new_tokens <= run.seq_len),
        "[config] distillation.max_new_tokens={}: expected 1 .. data.seq_len={} (each window's "
        "first seq_len + 1 - max_new_tokens tokens are the prompt)",
        d.max_new_tokens, run.seq_len);
  check(d.layer_loss_weight >= 0 && std::isfinite(d.layer_loss_weight),
        "[config] distillation.layer_loss_weight={}: expected a finite number >= 0",
        d.layer_loss_weight);
  check(d.loss_chunk_tokens >= 0,
        "[config] distillation.loss_chunk_tokens={}: expected >= 0 (0: 64 MiB of probabilities "
        "per chunk)",
        d.loss_chunk_tokens);
  (void)parse_layer_map(d.layer_map);
  if (!d.enabled()) return;
  // The student's samples are trained on by the KD loss (and the hidden states' loss) alone:
  // their tokens have no real next token, so the cross-entropy masks them (on_policy.h). With
  // kd_ratio=0 and no layer loss a sampled batch trains nothing, and with lmbda=1 and
  // max_new_tokens=seq_len (a one-token prompt) no position of any batch does: loss 0, grad
  // norm 0, every step.
  const bool layer_loss = !d.layer_map.empty() && d.layer_loss_weight > 0;
  if (d.lmbda > 0 && d.kd_ratio == 0 && !layer_loss) {
    const bool nothing = d.lmbda == 1 && d.max_new_tokens >= run.seq_len;
    throw ConfigError(fmt::format(
        "[config] distillation.lmbda={} with distillation.kd_ratio=0: the batches the student "
        "samples are trained on by the KD loss alone (their sampled tokens have no real next "
        "token for the cross-entropy), and its weight is 0{}. Set distillation.kd_ratio > 0 (the "
        "KD loss's weight), or lmbda=0 (no sampling)",
        d.lmbda,
        nothing ? fmt::format("; with lmbda=1 and max_new_tokens={} = data.seq_len the prompt is "
                              "one token, so no position of any batch trains: every step's loss "
                              "would be 0",
                              d.max_new_tokens)
                : std::string(": they would train nothing")));
  }
  if (d.lmbda == 1 && d.max_new_tokens >= run.seq_len && d.kd_ratio < 1) {
    // The KD loss trains; the cross-entropy's share, (1 - kd_ratio), has no position.
    throw ConfigError(fmt::format(
        "[config] distillation.lmbda=1 with distillation.max_new_tokens={} = data.seq_len: every "
        "batch is the student's samples after a one-token prompt, so no position has a real next "
        "token and the cross-entropy (weight 1 - kd_ratio = {}) averages over none. Use "
        "max_new_tokens < data.seq_len (such as {}) to keep a prompt, or kd_ratio=1 (the KD loss "
        "alone)",
        d.max_new_tokens, 1 - d.kd_ratio, std::max<int64_t>(1, run.seq_len / 2)));
  }
  check(!d.teacher.empty() || (!sampling && d.layer_map.empty()),
        "[config] distillation.teacher_cache without distillation.teacher, with {}: the cache "
        "holds the teacher on the data's windows only; the teacher itself must score the "
        "samples and give its hidden states. Give distillation.teacher too",
        sampling ? fmt::format("lmbda={} seq_kd={}", d.lmbda, d.seq_kd) : "layer_map");
  // Under TP the student's logits are split over the vocabulary and the loss is computed on
  // each rank's columns (vocab_parallel_distill_loss.h): the teacher's columns come from its
  // whole logits, which a cache's top-K are not; its hidden states are the student's sequence
  // pieces under sequence parallelism.
  const int64_t tp = run.tensor_parallel;
  check(tp == 1 || d.teacher_cache.empty(),
        "[config] distillation.teacher_cache with parallelism.tensor_parallel_degree={}: a "
        "tensor-parallel student takes its vocabulary columns of the live teacher's logits; "
        "drop the cache (distillation.teacher scores the batches) or use tensor_parallel_degree=1",
        tp);
  check(tp == 1 || d.layer_map.empty() || !run.sequence_parallel,
        "[config] distillation.layer_map with parallelism.enable_sequence_parallel=true: each "
        "rank holds a piece of the sequence of the student's hidden states; set "
        "enable_sequence_parallel=false (tensor parallelism alone keeps them whole)");
  // A pipelined student's last stage computes the loss from the teacher's side of the step's
  // rows, made before the pipeline runs (samples included: the student's through the stages).
  // The student's hidden states of layer_map live on the stages that hold those layers, not
  // with the loss (docs/distillation.md#under-pipeline-parallelism).
  const int64_t pp = run.pipeline_parallel;
  check(pp == 1 || d.layer_map.empty(),
        "[config] distillation.layer_map with parallelism.pipeline_parallel_degree={}: the "
        "student's hidden states of the mapped layers live on the stages that hold those layers, "
        "not on the last stage where the loss is computed; drop layer_map or set "
        "pipeline_parallel_degree=1",
        pp);
}

std::vector<std::pair<int64_t, int64_t>> parse_layer_map(const std::vector<std::string>& map) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  if (map.size() == 1 && map.front() == "auto") return pairs;
  const auto bad = [&](const std::string& item) {
    return ConfigError(fmt::format(
        "[config] distillation.layer_map holds '{}': expected 'S:T' pairs (the student's layer "
        "S, the teacher's layer T, whole numbers) each student layer once, or [auto] alone (the "
        "layers model.init_from's compress.json kept)",
        item));
  };
  for (const auto& item : map) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) throw bad(item);
    int64_t st[2];
    const std::string parts[2] = {item.substr(0, colon), item.substr(colon + 1)};
    for (int i = 0; i < 2; ++i) {
      size_t used = 0;
      try {
        st[i] = std::stoll(parts[i], &used);
      } catch (const std::exception&) {
        throw bad(item);
      }
      if (used != parts[i].size() || st[i] < 0) throw bad(item);
    }
    for (const auto& p : pairs) {
      if (p.first == st[0]) {
        throw ConfigError(fmt::format(
            "[config] distillation.layer_map: student layer {} appears twice ('{}:{}' and "
            "'{}'); each student layer maps to one teacher layer",
            st[0], p.first, p.second, item));
      }
    }
    pairs.emplace_back(st[0], st[1]);
  }
  return pairs;
}

}  // namespace fsdpp::distill
