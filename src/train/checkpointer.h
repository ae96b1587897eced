#pragma once
// fsdpp-train's checkpoints: checkpoint-<step> directories holding the model and optimizer
// state (fsdpp::state), trainer_state.json (step, LR schedule, data position, every rank's
// generator states) and model_config.json; saved synchronously or by a background writer
// (training.async_save), pruned to save_total_limit, and read back on resume.
// Private to src/train: the trainer is its only user.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/data/sampler.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/fsdp/grad_scaler.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/state/state_dict.h"
#include "fsdpp/train/config_enums.h"
#include "fsdpp/train/lr_schedule.h"

namespace fsdpp::train::detail {

inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kModelConfigFile = "model_config.json";
// trainer_state.json's format version: 2 added the schedule and generator states, 3 the seed,
// data path and sequence length the data position refers to, 4 the distillation teacher and
// the digest of metrics.jsonl. Older files still read.
inline constexpr int kTrainerStateVersion = 4;

// The complete checkpoints in `out_dir` (directories "checkpoint-<step>" holding a
// trainer_state.json), oldest first. Temporary directories of saves that did not finish
// ("checkpoint-<step>.tmp-<pid>-<hex>") do not match and are not listed.
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(
    const std::filesystem::path& out_dir);

// The state of this process's default random generators: the CPU generator (what torch::rand*
// and dropout draw from) and, when CUDA is there, each device's.
struct RngState {
  std::string cpu;                // the generator's state bytes
  std::vector<std::string> cuda;  // per device
};
RngState capture_rng();
// Puts the generators back; CUDA devices beyond those present (or saved) are left alone.
void restore_rng(const RngState& rng);

// What trainer_state.json holds.
struct TrainerState {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t windows_consumed = 0;  // training windows of `epoch` consumed over all ranks
  int64_t world_size = 0;
  std::string state_dict_type;
  std::optional<LrSchedule> schedule;  // absent in checkpoints of older versions
  double lr = 0;                       // the learning rate of `step`
  std::vector<RngState> rng;           // one per rank that saved; empty in older checkpoints
  std::optional<GradScalerState> grad_scaler;  // fp16 runs: the loss scale to continue with
  // What the saved data position (epoch, windows_consumed) refers to; absent in checkpoints
  // of versions before 3 (their seed is then read from model_config.json).
  std::optional<uint64_t> seed;          // training.seed (the sampler's shuffle)
  std::optional<std::string> data_path;  // data.path, resolved (weakly_canonical)
  std::optional<int64_t> seq_len;        // data.seq_len
  // Version 4: distillation.teacher, resolved ("" for a run without one), so that a resume
  // that changes or drops the teacher says so; and the XXH3-64 (hex) of metrics.jsonl as it
  // was when the checkpoint was saved (rank 0's), so that a resume never appends to another
  // run's lines (restore.cpp).
  std::optional<std::string> teacher;
  std::optional<std::string> metrics_digest;
};

std::string trainer_state_to_json(const TrainerState& s);
// Throws ConfigError naming `path` when the text is not a trainer state: not JSON, a field
// missing or of the wrong type, or a value no save writes (step, epoch or windows_consumed < 0,
// world_size < 1, an unknown schedule type or state_dict_type, a learning rate that is not
// finite or is negative, a format version this build does not know, ...). Generator states are
// only checked to be base64 here (see read_trainer_state).
TrainerState trainer_state_from_json(const std::string& text, const std::string& path);
// DIR/trainer_state.json; ConfigError when it is missing ("not a complete checkpoint"), not a
// regular file, not a trainer state, or when a rank's CPU generator state is not one this
// build of LibTorch can restore (naming the file and the rank).
TrainerState read_trainer_state(const std::filesystem::path& dir);

// What the checkpointer is made from: training:'s checkpoint keys, and what trainer_state.json
// records of the run so that a resume into another one says so (restore.cpp fills it from the
// config).
struct CheckpointOptions {
  std::filesystem::path output_dir;  // training.output_dir: where checkpoint-<step> go
  state::SaveOptions layout;         // fsdp_state_dict_type (TrainConfig::state_dict_options)
  SaveStrategy strategy = SaveStrategy::STEPS;  // training.save_strategy
  int64_t save_steps = 0;
  int64_t steps_per_epoch = 1;  // save_strategy epoch saves every this many steps
  bool save_only_model = false;
  int64_t save_total_limit = 0;
  bool async_save = false;
  uint64_t seed = 42;     // training.seed: the generators' seed, and the sampler's shuffle
  std::string data_path;  // data.path and data.seq_len: what the data position refers to
  int64_t seq_len = 0;
  std::string teacher;  // distillation.teacher; empty without one
  int64_t dp = 1;       // data-parallel ranks: the data position counts the windows of them all
};

class Checkpointer {
 public:
  // Collective: seeds the default generators with options.seed (on every rank, as Hugging
  // Face's set_seed) so that a fresh run's random draws are reproducible, and, with
  // async_save, sets up the background writer.
  // `model` (which must outlive it) writes model_config.json and judges a saved one.
  Checkpointer(CheckpointOptions options, std::shared_ptr<dist::World> world,
               const models::CausalLM& model);
  // Joins a background save still running (its outcome is only reported by finish()).
  ~Checkpointer();

  // Collective. Loads the model and optimizer state of `dir` (saved on any world size for
  // SHARDED and FULL), then this rank's generator states (when the checkpoint has them for
  // this rank). Returns what is needed to position the sampler and the schedule, and says
  // (rank 0) what was restored and what changed (world size, schedule). What would make the
  // resumed run another run is checked first (docs/faults.md, "Resuming into something
  // else"): a model setting the weights' meaning depends on (rope_theta, norm_eps, n_heads,
  // n_kv_heads) that differs from model_config.json is a ConfigError; a checkpoint without
  // optimizer state, or another training.seed, data.path or data.seq_len than the checkpoint
  // was saved with, is a warning naming both values.
  void restore(const std::filesystem::path& dir, const TrainerState& state,
               torch::nn::Module& model, torch::optim::Optimizer& opt, const LrSchedule& schedule);

  // Whether save_strategy saves after `step`: steps (every save_steps), epoch (every pass over
  // the data), no. Unless no, the last step is saved too when the run ends (finish.cpp), so that
  // a run always leaves its weights.
  bool save_due(int64_t step) const;
  // The step of the last save (started, when asynchronous); a resume's step before any; 0: none.
  int64_t last_saved() const;

  // Collective. Saves <output_dir>/checkpoint-<step> (after optimizer step `step`) in the
  // configured layout, with trainer_state.json and model_config.json inside the atomic commit;
  // then deletes the oldest complete checkpoints beyond save_total_limit. With async_save, waits
  // for the previous save (throwing its error), copies the state and returns while a
  // background thread writes it.
  void save(int64_t step, torch::nn::Module& model, torch::optim::Optimizer& opt,
            const data::SamplerState& sampler, const LrSchedule& schedule);
  // Runs before each checkpoint data file a rank writes (TrainerHooks::before_checkpoint_write,
  // passed on as state::SaveOptions::before_write); none by default.
  void set_before_write(std::function<void(int rank, const std::string& file)> hook);
  // Files written into every checkpoint beside the state (the run's tokenizer, so that it
  // travels with the model: data/tokenizer_files.h).
  void add_files(std::map<std::string, std::string> files);
  // A pipelined run: this rank's stages, which save() and restore() use instead of `model`
  // (state::save_state_dict's parts: the ranks together write and read the whole model's
  // checkpoint, loadable into any layout). They must outlive the checkpointer.
  void set_parts(std::vector<torch::nn::Module*> parts);
  // fp16: the loss scaler whose state save() records (nullptr: none).
  void track_grad_scaler(const ShardedGradScaler* scaler);

  // Collective. Waits for a background save still in flight; throws its error (naming the
  // checkpoint) on every rank. Call it at the end of training.
  void finish();

 private:
  // The checks restore() starts with (see there). Throws ConfigError; warns on rank 0.
  void check_resume_compatible(const std::filesystem::path& dir, const TrainerState& state) const;

  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace fsdpp::train::detail
