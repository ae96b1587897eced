// The distillation: section's checks (config.h): ranges named by their keys with what is
// accepted, and what distillation does not combine with.
#include <cmath>

#include "fsdpp/common/error.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {
namespace {

template <typename... Args>
void check(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) throw ConfigError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace

void validate_distillation(const TrainConfig& cfg) {
  const auto& d = cfg.distillation;
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
  if (!d.enabled()) return;
  // The student's logits are split over the vocabulary under TP; the loss needs them whole.
  check(cfg.parallelism.tensor_parallel_degree == 1,
        "[config] distillation.teacher with parallelism.tensor_parallel_degree={}: the KD loss "
        "needs the student's whole vocabulary on each rank; expected 1",
        cfg.parallelism.tensor_parallel_degree);
  // The pipelined step computes the loss in the last stage, which has no teacher (yet).
  check(cfg.parallelism.pipeline_parallel_degree == 1,
        "[config] distillation.teacher with parallelism.pipeline_parallel_degree={}: the "
        "pipelined step has no teacher; expected 1",
        cfg.parallelism.pipeline_parallel_degree);
}

}  // namespace fsdpp::train
