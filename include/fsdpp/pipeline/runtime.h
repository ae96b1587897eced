#pragma once
// The pipeline runtime: executes a verified PipelineSchedule's action list on this rank of the
// pp group, moving activations and gradients with fsdpp::dist send/recv (docs/pipeline.md).
//
//   auto sched = pipeline::make_schedule("ZBH1", pp->size(), /*microbatches=*/8);
//   std::vector<pipeline::PipelineStage> mine;              // the stages this rank holds
//   for (int s : sched.stages_of(pp->rank())) mine.push_back(pipeline::make_stage(s, ...));
//   pipeline::PipelineRuntime rt(sched, std::move(mine), pp, {.store = world->store()});
//   auto out = rt.step(tokens, targets);   // forward and backward of the global batch
//   fsdpp::clip_grad_norm_(rt.placed_params(), 1.0, 2.0, {pp});  // fsdp/clip.h; then step()
//
// Loss and gradients are those of single-process training on the whole batch: dim 0 of the
// batch is split into m equal microbatches, the last stage computes each microbatch's mean
// loss, and backward starts from it with the gradient 1/m (the gradients are scaled once, as
// the mean over the global batch). Gradients accumulate in the parameters' .grad over the
// microbatches; the caller zeroes them after its optimizer step.
//
// Actions: F forward; B full backward; I the input gradient only (autograd through the stage
// to its input, keeping the graph); W the weight gradient only, later, from the gradients I left
// at the nodes where the weights' paths leave the input's (split_backward.h); SEND_* / RECV_*
// with send_async / recv_async on the pp group; UNSHARD / RESHARD / REDUCE_GRAD for stages that
// are fully_shard-ed: fsdpp::unshard / reshard / reduce_gradients (fully_shard.h), which hold a
// stage gathered across its microbatches and reduce its gradients once per step, after the
// last W of a zero-bubble schedule as well as after the last B (Options::keep_gathered).
//
// Shapes: before the first activation of a stage crosses to another rank, its shape and dtype
// go over once; the receiver checks them against its stage's input_spec, and a mismatch is an
// error naming both stages before any activation moves. Later steps reuse them (the sender
// checks that its output still has them).
//
// Failures: an exception on any rank (a stage's forward, a recv timing out, ...) is rethrown as
// fsdpp::Error naming the stage, the microbatch, the action and the schedule; a send or recv that
// stalls is diagnosed (Options::stall_check_after) long before its timeout; with Options::store set, the
// failing rank also posts it there, and every other rank waiting in the pipeline stops within
// about poll_interval with "[pipeline] rank R stopped at action ...: stage S on rank Q failed
// ...". A rank killed outright is fsdpp-run's to handle.

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>  // RuntimeOptions::store, copied by its users

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/dist/process_group.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/pipeline/schedule.h"
#include "fsdpp/pipeline/stage.h"
#include "fsdpp/pipeline/timeline.h"


namespace fsdpp::pipeline {
class StallCheck;

struct RuntimeOptions {
  // Where a failing rank posts its error so that the others stop at once (null: they stop at
  // the pp group's timeout). The world's store: world->store().
  c10::intrusive_ptr<c10d::Store> store;
  // The key it is posted under (every rank of the job must agree; empty: a name made from the
  // pp group's name).
  std::string abort_key;
  std::chrono::milliseconds poll_interval{20};
  // FSDP stages: true (torchtitan's default under PP): each stage's parameters are gathered at
  // its first action of the step and stay gathered until its last (UNSHARD / RESHARD, added
  // with add_fsdp_actions when the schedule has none), and its gradients accumulate unsharded
  // until REDUCE_GRAD reduce-scatters them once; one all-gather and one reduce-scatter per unit
  // per step, for the memory of the whole stage's parameters and gradients held throughout.
  // false: FSDP's own hooks gather and reshard around every microbatch as the strategy says
  // and reduce at the stage's last backward; schedules that split backward (I / W) need true.
  bool keep_gathered = true;
  // FSDP stages: reduce-scatter the gradients after every microbatch (sharded gradients
  // throughout) instead of once per step after the stage's last backward.
  bool reduce_grad_every_microbatch = false;
  // A send or recv that has not completed after this long starts the stall check
  // (stall_check.h; needs `store`): each stuck rank publishes its position, and a
  // message that was sent but never arrived, or ranks waiting on each other in a cycle, end the
  // step at once with an Error naming the schedule, the step and each rank's action, instead of
  // the pp group's timeout. 0: a fifth of the pp group's timeout, at most 5 s (as the collective
  // monitor); negative: off.
  std::chrono::milliseconds stall_check_after{0};
  // Post every recv of a step at its start (from the second step on, once shapes are agreed),
  // so that messages are taken as soon as they are sent; false: each when its action comes.
  bool post_recvs_early = true;
  // Bytes in use now (e.g. malloc_bytes_in_use() of timeline.h on CPU), read at the step's
  // start and after every action: the timeline then has each action's reading and each rank's
  // peak above its start (MeasuredRank), the activation memory of its schedule measured.
  std::function<int64_t()> memory_probe;
};

// A step's loss on the last stage in place of that stage's own: of one microbatch's output, its
// targets and its index (0 .. num_microbatches - 1), e.g. a distillation objective against the
// teacher's slice of the batch for that microbatch. It may call the stage's own loss.
using MicrobatchLoss =
    std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets, int microbatch)>;

struct StepOutput {
  double loss = 0;                        // mean over the batch, on every rank of the pp group
  std::vector<double> microbatch_losses;  // on the rank holding the last stage (else empty)
};

class PipelineRuntime {
 public:
  // Verifies the schedule (verify.h), checks that `stages` are exactly the stages the schedule
  // puts on this rank of `pp` and that the last stage has a loss.
  PipelineRuntime(PipelineSchedule schedule, std::vector<PipelineStage> stages,
                  std::shared_ptr<dist::ProcessGroup> pp, RuntimeOptions options = {});
  ~PipelineRuntime();
  PipelineRuntime(const PipelineRuntime&) = delete;
  PipelineRuntime& operator=(const PipelineRuntime&) = delete;

  // One forward and backward of the global batch. `inputs` is read on the rank holding stage
  // 0 and `targets` on the rank holding the last stage (others may pass undefined tensors);
  // dim 0 must divide into num_microbatches. `loss`, when given, is this step's loss of each
  // microbatch on the last stage instead of the stage's own. `shared`, when defined, is read on
  // every rank and split like inputs: each stage's forward_shared gets its microbatch's rows
  // (ConfigError for a stage without one). Collective over the pp group.
  StepOutput step(const at::Tensor& inputs, const at::Tensor& targets,
                  const MicrobatchLoss& loss = {}, const at::Tensor& shared = {});

  const PipelineSchedule& schedule() const { return schedule_; }
  const std::vector<PipelineStage>& stages() const { return stages_; }
  // The parameters of this rank's stages (each once), for the optimizer.
  std::vector<at::Tensor> parameters() const;
  // The same with their placements, for fsdpp::clip_grad_norm_ across the pp group (fsdp/
  // clip.h): each stage's fsdpp::placed_params, so fully_shard-ed stages' shards and, for
  // stages that are not, `layout` (tensor parallelism's outer_layout; none: whole).
  std::vector<ShardedParam> placed_params(const OuterLayoutOf& layout = {}) const;
  // This rank's actions of the last step with their times.
  const MeasuredRank& last_timings() const { return timings_; }
  // Every rank's, summarized (collective over the pp group).
  MeasuredTimeline gather_timeline() const;

  struct State;  // per step: stashed activations, messages in flight (runtime.cpp)

 private:
  void run_action(size_t index, const Action& a, State& st);
  void post_recvs(State& st);
  [[noreturn]] void fail(size_t index, const Action& a, const std::string& what);
  // Waits for the send or recv of action `index` (the list's size: the step's sends), stopping
  // when another rank posted its failure or the stall check finds the pipeline stuck.
  void wait(dist::Work& work, size_t index, const Action& a, State& st);

  PipelineSchedule schedule_;
  std::vector<PipelineStage> stages_;
  std::shared_ptr<dist::ProcessGroup> pp_;
  RuntimeOptions options_;
  std::vector<int> local_;  // stage -> index in stages_, -1 when elsewhere
  std::vector<int> last_backward_;  // stage -> the microbatch of its last B on this rank
  bool fsdp_ = false;       // the stages are fully_shard-ed
  at::Device device_ = at::kCPU;  // of the stages' parameters: where messages are allocated
  MeasuredRank timings_;
  // Shape and dtype of each stage's output (what crosses to the next stage), once agreed.
  std::vector<std::vector<int64_t>> out_sizes_;
  std::vector<at::ScalarType> out_dtypes_;
  std::vector<bool> agreed_;
  int64_t steps_ = 0;  // step() calls so far, for messages
  std::unique_ptr<StallCheck> stall_;  // with Options::store
};

}  // namespace fsdpp::pipeline
