#include "metrics_line.h"

namespace fsdpp::observe::detail {

double tokens_per_s(const StepReport& r) { return r.tokens / (r.step_ms / 1000.0); }

nlohmann::json metrics_line(const StepReport& r, const RankMemory& memory, double elapsed_s) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  if (r.val_loss) j["val_loss"] = *r.val_loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  if (r.loss_scaling) {
    j["loss_scale"] = r.loss_scaling->scale;
    j["skipped_steps"] = r.loss_scaling->skipped_steps;
    j["step_skipped"] = r.loss_scaling->step_skipped;
  }
  j["tokens_per_s"] = tokens_per_s(r);
  j["step_ms"] = r.step_ms;
  j["peak_rss_mb"] = memory.peak_max_mb;
  j["peak_rss_mb_per_rank"] = memory.peak_mb;
  j["rss_mb_per_rank"] = memory.current_mb;
  j["comm_bytes"] = r.comm_bytes;
  j["comm_bytes_intra"] = r.comm_bytes_intra;
  j["comm_bytes_inter"] = r.comm_bytes_inter;
  if (r.experts) {
    j["aux_loss"] = r.experts->aux_loss;
    j["expert_load_min"] = r.experts->load_min;
    j["expert_load_max"] = r.experts->load_max;
    j["expert_load_cv"] = r.experts->load_cv;
  }
  if (r.comm_bytes_tp) j["comm_bytes_tp"] = *r.comm_bytes_tp;
  for (const auto& [key, value] : r.figures.items()) j[key] = value;
  j["elapsed_s"] = elapsed_s;
  return j;
}

}  // namespace fsdpp::observe::detail
