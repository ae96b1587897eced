#pragma once
// The phases of Trainer::run, in the order it calls them; each reads what the phases before it
// left in the TrainSession (session.h) and adds its own. Every rank runs every phase: the
// collectives inside them (barriers, agree_on_failure, all-reduces) are issued in the same
// order on every rank. Private to src/train.
//
//   choose_start        which checkpoint to resume from (FSDPP_RESTART_COUNT, resume_from_checkpoint),
//                       or model.init_from's shape for a fresh run; the layout on this world
//                       (parallel_dims) and the run model's checks of it (RunModel::check_layout:
//                       fsdpp-train's pipeline cut of model.n_layers)      (start.cpp)
//   prepare_output_dir  rank 0's lock on output_dir, the cache dir, config.yaml (start.cpp)
//   prepare_data        the run model's data (RunModel::prepare_data): fsdpp-train's corpus,
//                       tokenizer, token cache, splits and sampler (prepare_data.cpp), or
//                       train()'s sources (custom_model.cpp)
//   build_model         the run model's model and plan (RunModel::build_model) after the memory
//                       check: fsdpp-train's Llama or Qwen3-MoE and init_from's weights before
//                       sharding (build_model.cpp), or train()'s module (custom_model.cpp)
//   shard_model         the mesh, wrap policy, mixed precision, parallelize with the run
//                       model's plan                                      (shard_model.cpp)
//   make_optimizer      AdamW, the loss scaler, disk offload, steps and schedule
//                                                                          (make_optimizer.cpp)
//   restore             the checkpointer; a resume's state, metrics and data position; the
//                       batch loader (training.dataloader_*)               (restore.cpp)
//   open_logs           traces, stop signal, the Reporter (metrics.jsonl, TensorBoard, heartbeat,
//                       progress line; fsdpp/observe/reporter.h)             (open_logs.cpp)
//   train_loop          train_step, evaluate, the step's report, save_due/save_checkpoint
//                                                                          (train_loop.cpp)
//   finish              the final save, the stop or done message, the sample (finish.cpp)
//
// What a phase needs of the model trained, it asks the session's run model (run_model.h):
// Trainer::run makes the session with fsdpp-train's language models (the model: and data:
// sections), train() (custom_model.h) with its CustomModel and TrainData; the phases are the
// same for both and never ask which one they have.

#include <cstdint>
#include <utility>

#include "session.h"

namespace fsdpp::train::detail {

// Every phase in order, on a session made for fsdpp-train's model or for train()'s (trainer.cpp).
TrainResult run_phases(TrainSession& s);

void choose_start(TrainSession& s);
void prepare_output_dir(TrainSession& s);
// prepare_data and build_model: s.run_model's (run_model.h).
void shard_model(TrainSession& s);
void make_optimizer(TrainSession& s);
void restore(TrainSession& s);
void open_logs(TrainSession& s);
void train_loop(TrainSession& s);
TrainResult finish(TrainSession& s);

// model.deferred_init (model_init.cpp): whether the model is made without storage, the device
// build_model makes it on (meta, or the CPU to build it whole), the device its shards live on,
// and, once sharded, this rank's parts given storage there and their values (drawn from the seed
// unless model.init_from or a resume's checkpoint gives them next).
bool deferred_init(const TrainConfig& cfg);
at::Device model_build_device(const TrainConfig& cfg);
at::Device model_device(const TrainSession& s);
void materialize_model(TrainSession& s, const std::vector<torch::nn::Module*>& parts);

// fsdp_sync_module_states: rank 0's parameters and buffers on every rank, over the world, before
// any unit exists or the model is cut into stages (shard_model.cpp); nothing under
// model.deferred_init, where the model has no values before it is sharded.
void sync_module_states(TrainSession& s, torch::nn::Module& model);

// Bytes the units moved over the shard groups (inside a node under hybrid_shard) and over the
// replicate groups (across nodes), for metrics.jsonl (shard_model.cpp).
std::pair<uint64_t, uint64_t> comm_split(TrainSession& s);

// What one optimizer step did (train_step.cpp).
struct StepOutcome {
  double lr = 0;
  // This rank's share of the step's loss (parallel::StepLoss::loss: its mean over the ranks is
  // the global batch's token mean) times the accumulation batches.
  double loss_sum = 0;
  double grad_norm = 0;
  bool stepped = true;  // false: the fp16 loss scaler skipped the step (an overflow)
  double loss_scale = 1;
  double aux_loss_sum = 0;  // MoE: this rank's load-balancing loss summed over the accumulation batches
};
// The step's rows (the data, or the distiller's) through parallel::Parallelized::forward_backward
// (every run: a model without a pipeline is one stage, its accumulation batches gradient accumulation;
// after_loss runs there per accumulation batch), then the hooks, unscale, clip (stopping on non-finite
// gradients), the optimizer step. Inside the step's trace event.
StepOutcome train_step(TrainSession& s, int64_t step);

// The validation loss averaged over every rank; NaN without a validation split (evaluate.cpp).
// Each batch writes a heartbeat (fsdpp-run --progress-timeout-s) and asks every rank whether a
// stop signal came: then the evaluation ends there, NaN, and `stopped` is set.
double evaluate(TrainSession& s, int64_t step, bool* stopped);

// Whether any rank received SIGTERM or SIGINT (StopSignal): one small all-reduce over the world
// (none on one rank), so every rank answers the same at the same point (train_loop.cpp). For the
// work between steps that can take long: evaluation and the final sample.
bool stop_requested(TrainSession& s);

// Whether training.save_strategy saves after `step`; save_checkpoint saves it (save.cpp).
bool save_due(const TrainSession& s, int64_t step);
void save_checkpoint(TrainSession& s, int64_t step);

}  // namespace fsdpp::train::detail
