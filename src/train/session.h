#pragma once
// The state of one Trainer::run, passed from phase to phase (phases.h): what each phase makes,
// in the order the phases make it. Members are destroyed in the reverse order, as the locals of
// one long function were: the loop's logs first, then the checkpointer (which waits for its
// background writer), the optimizer, the model and, last, rank 0's lock on output_dir.
// Private to src/train.

#include <torch/optim/adamw.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fsdpp/data/batch_loader.h"
#include "fsdpp/data/document_sampler.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/share.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/dist/trace.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/distill/distiller.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/grad_scaler.h"
#include "fsdpp/observe/reporter.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/model_source.h"
#include "fsdpp/parallel/parallelize.h"
#include "fsdpp/optim/disk_offload.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/hooks.h"
#include "fsdpp/train/lr_schedule.h"
#include "fsdpp/train/parallel_dims.h"
#include "fsdpp/train/batch_source.h"
#include "fsdpp/train/trainer.h"
#include "checkpointer.h"
#include "output_dir.h"
#include "pipeline_step.h"
#include "run_model.h"
#include "step_plan.h"
#include "stop_signal.h"

namespace fsdpp::train::detail {

struct TrainSession {
  TrainSession(TrainConfig& config, std::shared_ptr<dist::World> world, const TrainerHooks& hooks,
               const RunModel& run_model);
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  // Prints `line` on rank 0.
  void say(const std::string& line) const;

  // ---- what the run is given
  TrainConfig& cfg;  // model.init_from may replace the model section (choose_start)
  std::shared_ptr<dist::World> world_ptr;
  dist::World& world;
  const TrainerHooks& hooks;
  const bool lead;  // rank 0: the rank that writes output_dir and prints
  // The model trained and its data (run_model.h): fsdpp-train's language models or train()'s.
  const RunModel& run_model;

  // ---- choose_start, prepare_output_dir
  std::filesystem::path out_dir;
  std::filesystem::path cache_dir;
  int restart_count = 0;
  std::filesystem::path resume_dir;  // empty: a fresh run
  std::optional<TrainerState> resumed;
  std::optional<models::ModelSource> init;  // model.init_from, unless resuming
  std::optional<OutputDirLock> dir_lock;  // held by rank 0 until run() returns

  // ---- prepare_data
  ParallelDims dims;  // the parallelism: section on this world; the sampler splits over dp
  // This rank's share of the data: its data-parallel rank (the ranks of a tp group the same),
  // training.seed; shuffled for training, in order for evaluation.
  data::ShareOptions share(bool shuffle) const {
    return {.rank = dims.dp_rank(world.rank()), .world_size = dims.dp(),
            .seed = cfg.training.seed, .shuffle = shuffle};
  }
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::optional<data::DistributedSampler> sampler;  // text: the token windows
  std::unique_ptr<data::DocumentSampler> doc_sampler;  // records: the prepared documents' rows
  // The training batches (batch_source.h): the sampler's windows through a BatchLoader
  // (training.dataloader_*), or train()'s source. Its state, not the sampler's, is what a
  // checkpoint saves. Declared after the sampler: gone (its workers stopped) before it.
  std::unique_ptr<train::BatchSource> batches;
  SourceFactory eval_batches;  // a source over the validation data; empty: no validation
  int64_t tokens_per_example = 0;  // data.seq_len for token windows; 0: examples, not tokens

  // ---- build_model, shard_model
  int64_t vocab = 0;
  // The model of model.architecture (or train()'s module behind the same interface).
  std::unique_ptr<models::CausalLM> lm;
  // The plan parallelize applies to it: models::plan_of(lm) for fsdpp-train's models, train()'s
  // module's own (or one that allows data parallelism alone).
  std::shared_ptr<models::ModelPlan> plan;
  // qwen3_moe: the top-k choices per expert over the global batch in the last forward.
  std::function<std::vector<int64_t>()> expert_load;
  bool hybrid = false;  // hybrid_shard*: replicas x shards
  // Every parallelism applied by parallel::parallelize over one mesh (docs/parallelize.md), to
  // fsdpp-train's models and train()'s alike: this rank's stages (the whole model without a
  // pipeline), the mesh, the record clipping reads, the pipeline's runtime.
  std::unique_ptr<parallel::Parallelized> parallel;
  bool pipelined() const { return parallel && parallel->pipelined(); }
  FullyShardOptions fopts;  // fully_shard's options
  // distillation: the teacher (live, parallelized on its own mesh, or an offline cache),
  // on-policy sampling and the loss (fsdpp/distill/distiller.h); null otherwise.
  std::unique_ptr<distill::Distiller> distiller;

  // ---- make_optimizer
  std::unique_ptr<torch::optim::AdamW> opt;
  std::unique_ptr<ShardedGradScaler> scaler;
  std::unique_ptr<DiskOffloadedOptimizer> offload;  // null: the state stays in memory
  StepPlan steps;  // the run's steps: their examples, how many, the tokens of each
  LrSchedule lr_schedule;

  // ---- restore
  // The checkpoints: saves when save_strategy says (and the last it saved), restores a resume.
  std::unique_ptr<Checkpointer> checkpointer;
  int64_t first_step = 1;

  // ---- open_logs
  std::shared_ptr<dist::TraceRecorder> trace;
  std::optional<StopSignal> stop_signal;  // SIGTERM/SIGINT: stop after the step in progress
  // metrics.jsonl, TensorBoard, the progress line, fsdpp-run's heartbeat, a GPU's memory and MFU
  // (fsdpp/observe/reporter.h): the loop hands it each step's report.
  std::optional<observe::Reporter> reporter;

  // ---- train_loop, finish
  TrainResult result;
  double val_loss = 0;  // NaN until evaluated
};

// "1 rank", "2 ranks": counts in messages read as English.
std::string count_of(int64_t n, std::string_view noun);

}  // namespace fsdpp::train::detail
