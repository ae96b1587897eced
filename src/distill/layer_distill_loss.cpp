// The intermediate-layer distillation loss (layer_distill_loss.h).
#include "fsdpp/distill/layer_distill_loss.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"

namespace fsdpp::distill {

at::Tensor layer_distillation_loss(const std::vector<at::Tensor>& student,
                                   const std::vector<at::Tensor>& teacher, const at::Tensor& mask,
                                   LayerLossType type,
                                   const std::vector<at::Tensor>& projections) {
  FSDPP_CHECK_AS(ConfigError,
                 !student.empty() && student.size() == teacher.size() &&
                     (projections.empty() || projections.size() == student.size()),
                 "[distill] layer loss over {} student and {} teacher states with {} "
                 "projections; expected as many states of each, at least one, and no "
                 "projection or one per pair",
                 student.size(), teacher.size(), projections.size());
  const auto keep = mask.to(at::kBool);
  at::Tensor total;
  for (size_t i = 0; i < student.size(); ++i) {
    const auto dtype = student[i].scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    auto s = student[i].to(dtype);
    const auto t = teacher[i].detach().to(dtype);
    const at::Tensor w = projections.empty() ? at::Tensor() : projections[i];
    FSDPP_CHECK_AS(ConfigError,
                   s.dim() == 3 && t.dim() == 3 && s.sizes().slice(0, 2) == keep.sizes() &&
                       t.sizes().slice(0, 2) == keep.sizes() &&
                       (w.defined() ? w.sizes() == at::IntArrayRef{t.size(2), s.size(2)}
                                    : s.size(2) == t.size(2)),
                   "[distill] layer pair {}: student states {} and teacher states {} for a mask "
                   "{}, projection {}; expected (B, T, D) both, the same width or a (D_teacher, "
                   "D_student) projection",
                   i, s.sizes().vec(), t.sizes().vec(), keep.sizes().vec(),
                   w.defined() ? fmt::format("{}", w.sizes().vec()) : "none");
    if (w.defined()) s = at::matmul(s, w.to(dtype).t());
    at::Tensor per_position;  // (B, T)
    if (type == LayerLossType::COSINE) {
      per_position = 1 - at::cosine_similarity(s, t, -1, 1e-8);
    } else {
      per_position = (s - t).pow(2).mean(-1);
    }
    const auto kept = keep.sum().to(dtype).clamp_min(1);
    const auto pair = per_position.masked_fill(keep.logical_not(), 0).sum() / kept;
    total = total.defined() ? total + pair : pair;
  }
  return total / static_cast<double>(student.size());
}

}  // namespace fsdpp::distill
