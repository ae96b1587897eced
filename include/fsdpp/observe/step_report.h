#pragma once
// What one logged optimizer step produced, as the training loop measured it. The Reporter
// (reporter.h) adds what it measures itself (every rank's memory, a GPU's peaks and MFU, the
// time since training began) and writes metrics.jsonl's line (docs/training.md#output),
// TensorBoard's scalars and the progress line from it.

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace fsdpp::observe {

struct StepReport {
  int64_t step = 0;
  double loss = 0;  // the global batch's mean
  double lr = 0;
  double grad_norm = 0;
  // The validation loss of an evaluation due after this step, when it is finite.
  std::optional<double> val_loss;
  // training.fp16: the loss scaler after the step (loss_scale, skipped_steps, step_skipped).
  struct LossScaling {
    double scale = 1;
    int64_t skipped_steps = 0;
    bool step_skipped = false;
  };
  std::optional<LossScaling> loss_scaling;
  int64_t tokens = 0;  // what the step trained on over every rank: tokens, or examples
  double step_ms = 0;
  // Bytes the step's collectives moved: all of them (comm_bytes), over the shard groups and
  // over the replicas (comm_bytes_intra, comm_bytes_inter), tensor parallelism's own
  // (comm_bytes_tp, with tp only).
  uint64_t comm_bytes = 0;
  uint64_t comm_bytes_intra = 0;
  uint64_t comm_bytes_inter = 0;
  std::optional<uint64_t> comm_bytes_tp;
  // A mixture of experts: the load-balancing loss and how evenly the step's top-k choices spread
  // over the experts (aux_loss, expert_load_min, expert_load_max, expert_load_cv).
  struct Experts {
    double aux_loss = 0;
    int64_t load_min = 0;
    int64_t load_max = 0;
    double load_cv = 0;
  };
  std::optional<Experts> experts;
  // Figures other components add under their own metrics.jsonl names (the distiller's kd_loss,
  // ce_loss, the teacher's collectives): numbers, booleans or arrays of numbers.
  nlohmann::json figures = nlohmann::json::object();
};

}  // namespace fsdpp::observe
