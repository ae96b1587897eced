// Pipeline parallelism in fsdpp-train: sampling through the stages of the Parallelized model.
// See pipeline_step.h and docs/pipeline.md#fsdpp-train.
#include "pipeline_step.h"

#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "phases.h"

namespace fsdpp::train::detail {

at::Tensor pipeline_generate(TrainSession& s, const at::Tensor& prompt,
                             const models::GenerateOptions& options) {
  auto& p = *s.parallel;
  const int64_t max_seq_len = s.cfg.model.max_seq_len, vocab = s.lm->vocab_size();
  at::Device device = prompt.device();
  for (const auto& t : p.parameters()) device = t.device();
  auto pp = p.mesh().group("pp");
  auto* parallel = s.lm->tensor_parallel();  // tp: each rank has its columns
  auto last_logits = [&](const at::Tensor& tokens) {
    // Sequence parallelism needs a length its degree divides (as models::generate pads).
    at::Tensor context = tokens;
    int64_t t = context.size(1);
    const int64_t multiple = parallel ? parallel->sequence_multiple() : 1;
    if (t % multiple != 0 && t + multiple - t % multiple <= max_seq_len) {
      context = at::cat({context, at::zeros({context.size(0), multiple - t % multiple}, context.options())}, 1);
    } else if (t % multiple != 0) {
      context = context.narrow(1, t % multiple, t - t % multiple);
      t = context.size(1);
    }
    auto out = p.forward_stages(context);  // (B,t,V) on the last stage's ranks
    auto last = at::empty({tokens.size(0), vocab}, at::TensorOptions(at::kFloat).device(device));
    if (out.defined()) {
      auto l = out.select(1, t - 1).to(at::kFloat);
      last.copy_(parallel ? parallel->whole_logits(l) : l);  // tp: each rank has its columns
    }
    pp->broadcast(last, p.last_stage_rank(), {"pipeline sample"});
    return last;
  };
  return models::sample_tokens(last_logits, {max_seq_len, vocab}, prompt.to(device, at::kLong),
                               options);
}

}  // namespace fsdpp::train::detail
