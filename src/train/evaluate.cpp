// evaluate (phases.h): the validation loss, in order over the validation split on every rank
// (no shuffle), averaged over the ranks; a heartbeat and a look for a stop signal per batch.
#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "phases.h"

namespace fsdpp::train::detail {

double evaluate(TrainSession& s, int64_t step, bool* stopped) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  if (!s.eval_batches) return std::nan("");
  // In order, each data-parallel rank its share (the ranks of a tp group the same).
  auto source = s.eval_batches(s.share(/*shuffle=*/false));
  train::BatchSource& val = *source;
  if (val.per_rank() < 1) return std::nan("");
  torch::NoGradGuard no_grad;
  const int64_t eb = std::min<int64_t>(t.per_device_eval_batch_size, val.per_rank());
  const int64_t batches = std::max<int64_t>(1, std::min<int64_t>(t.eval_max_batches, val.per_rank() / eb));
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    s.reporter->beat(fmt::format("evaluating after step {}: batch {} of {}", step, i + 1, batches));
    if (stop_requested(s)) {
      *stopped = true;
      return std::nan("");
    }
    auto [x, y, starts, positions] = val.next(eb);
    x = x.to(world.device());
    y = y.to(world.device());
    if (positions.defined()) positions = positions.to(world.device());
    sum += s.parallel ? s.parallel->eval_loss(x, y, positions)
                      : s.lm->forward(x, y, positions).loss.item<double>();
  }
  auto v = torch::tensor({sum / batches}, torch::kDouble);
  world.group()->all_reduce(v, dist::ReduceOp::AVG, {"eval"});
  return v.item<double>();
}

}  // namespace fsdpp::train::detail
