// restore (phases.h): the checkpointer (which seeds the generators) and, for a resumed run, the
// checkpoint's model, optimizer, schedule, loss scale, generator states and data position; then
// the batch loader from that position.
#include <chrono>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/observe/metrics_log.h"
#include "phases.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

// metrics.jsonl for a run resumed from the checkpoint of `ts`: without the lines of steps after
// it (left by a run that went on past it), rewritten atomically, then appended to. What is left
// must be what the checkpoint's run had written when it saved (its digest, trainer_state.json
// version 4): lines of another run (a checkpoint copied into this output_dir, a directory reused
// by an older fsdpp) are moved aside to metrics.jsonl.other-<seconds since 1970>, and the
// resumed run's lines start after the checkpoint. Returns the warning that says so.
std::optional<std::string> resume_metrics(const fs::path& path, const TrainerState& ts) {
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).at("step").get<int64_t>() > ts.step) continue;
    } catch (const nlohmann::json::exception&) {
      continue;  // a half-written last line of a killed run
    }
    kept += line + "\n";
  }
  in.close();
  if (!ts.metrics_digest || ts.metrics_digest->empty() ||
      *ts.metrics_digest == observe::metrics_text_digest(kept)) {
    write_file_atomically(path, kept, "train");
    return std::nullopt;
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  fs::path aside = path;
  aside += fmt::format(".other-{}", std::chrono::duration_cast<std::chrono::seconds>(now).count());
  std::error_code ec;
  fs::rename(path, aside, ec);
  FSDPP_CHECK(!ec, "[train] cannot move '{}' aside to '{}': {}", path.string(), aside.string(),
              ec.message());
  write_file_atomically(path, "", "train");
  return fmt::format("[train] warning: {} is not the one the checkpoint's run wrote (its lines up "
                     "to step {} differ from what the checkpoint recorded: another run wrote "
                     "them); kept as {}, and this run's lines start after step {}",
                     path.string(), ts.step, aside.string(), ts.step);
}

// The checkpointer's options from training:'s checkpoint keys, the data and the teacher a
// checkpoint records, the run's data-parallel ranks and its steps per pass over the data.
CheckpointOptions checkpoint_options(const TrainConfig& cfg, const StepPlan& steps, int64_t dp) {
  const auto& t = cfg.training;
  return {.output_dir = t.output_dir,
          .layout = cfg.state_dict_options(),
          .strategy = t.save_strategy,
          .save_steps = t.save_steps,
          .steps_per_epoch = steps.steps_per_epoch,
          .save_only_model = t.save_only_model,
          .save_total_limit = t.save_total_limit,
          .async_save = t.async_save,
          .seed = t.seed,
          .data_path = cfg.data.path,
          .seq_len = cfg.data.seq_len,
          .teacher = cfg.distillation.teacher,
          .dp = dp};
}

}  // namespace

void restore(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  const bool lead = s.lead;
  const auto& out_dir = s.out_dir;
  const auto& resume_dir = s.resume_dir;
  const auto& resumed = s.resumed;
  torch::nn::Module& model = s.lm->module();
  auto& opt = *s.opt;
  auto& scaler = *s.scaler;
  auto& offload = s.offload;
  auto& batches = *s.batches;
  const auto& tokenizer = s.tokenizer;
  const int dp = s.dims.dp();  // the ranks of a tp group read the same windows
  // Seeds the generators, and holds the background writer of training.async_save.
  s.checkpointer = std::make_unique<Checkpointer>(checkpoint_options(cfg, s.steps, dp),
                                                  s.world_ptr, *s.lm);
  auto& checkpointer = *s.checkpointer;
  if (s.pipelined()) checkpointer.set_parts(s.parallel->roots());
  checkpointer.track_grad_scaler(&scaler);
  checkpointer.set_before_write(s.hooks.before_checkpoint_write);
  // The tokenizer travels with the model (a language model's: train()'s models have none).
  if (tokenizer) checkpointer.add_files(data::tokenizer_files(*tokenizer));
  int64_t& first_step = s.first_step = 1;
  if (resumed) {
    checkpointer.restore(resume_dir, *resumed, model, opt, s.lr_schedule);  // + generator states
    if (const auto* projections = s.distiller ? s.distiller->projections() : nullptr) {
      if (auto warning = projections->restore(resume_dir, &opt)) s.say(*warning);
    }
    if (resumed->grad_scaler) scaler.load_state(*resumed->grad_scaler);
    // Only once the checkpoint loaded: a corrupt one must not cost the metrics of the steps
    // after it.
    if (lead) {
      if (auto warning = resume_metrics(out_dir / "metrics.jsonl", *resumed)) s.say(*warning);
    }
    if (offload) offload->offload_state();  // the loaded state out of memory before step 1
    // The sampler continues after the windows consumed over all ranks, whatever the world size
    // was: each rank is at consumed / world_size in the epoch (exact when it divides).
    data::SamplerState ss{resumed->epoch, resumed->windows_consumed / dp};
    if (ss.position >= batches.per_rank()) ss = {ss.epoch + 1, 0};
    batches.load_state(ss);
    first_step = resumed->step + 1;
    s.say(fmt::format("[train] resumed from {} (step {}, saved on {}): epoch {}, {} consumed{}",
                      resume_dir.string(), resumed->step, count_of(resumed->world_size, "rank"),
                      resumed->epoch, count_of(resumed->windows_consumed, "window"),
                      resumed->windows_consumed % dp == 0
                          ? ""
                          : fmt::format(" (not a multiple of {}: {} skipped)",
                                        count_of(dp, "data-parallel rank"),
                                        resumed->windows_consumed % dp)));
  } else if (!t.resume_from_checkpoint.empty()) {
    s.say(fmt::format("[train] no complete checkpoint in {} to resume from: starting at step 1",
                      out_dir.string()));
  }
}

}  // namespace fsdpp::train::detail
