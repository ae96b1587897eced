// choose_start and prepare_output_dir (phases.h): where the run starts from, and rank 0's hold
// on output_dir.
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/state/atomic_dir.h"
#include "phases.h"
#include "restart_count.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {

// Every rank resolves the same checkpoint on the shared file system.
void choose_start(TrainSession& s) {
  auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& out_dir = s.out_dir;
  auto& resume_dir = s.resume_dir;
  auto& resumed = s.resumed;
  auto& init = s.init;
  out_dir = t.output_dir;
  s.cache_dir = cfg.data.cache_dir.empty() ? out_dir / "cache" : fs::path(cfg.data.cache_dir);
  // A job that fsdpp-run restarted after a failure (FSDPP_RESTART_COUNT >= 1) goes on from the
  // newest complete checkpoint of output_dir, whatever resume_from_checkpoint says: restarting
  // from an older one (or from scratch) would throw away the steps the failed attempt saved.
  const int restart_count = s.restart_count = restart_count_from_env();
  if (restart_count > 0) {
    const auto found = list_checkpoints(out_dir);
    if (!found.empty()) resume_dir = found.back().second;
  }
  if (!resume_dir.empty()) {
    s.say(fmt::format("[train] restart {}: resuming from the newest checkpoint", restart_count));
  } else if (t.resume_from_checkpoint == "latest") {
    const auto found = list_checkpoints(out_dir);
    if (!found.empty()) resume_dir = found.back().second;
  } else if (!t.resume_from_checkpoint.empty()) {
    resume_dir = t.resume_from_checkpoint;
    FSDPP_CHECK_AS(ConfigError, fs::is_directory(resume_dir),
                   "[train] training.resume_from_checkpoint='{}' is not a directory; expected a "
                   "checkpoint-<step> directory, 'latest' or ''",
                   t.resume_from_checkpoint);
  }
  if (!resume_dir.empty()) resumed = read_trainer_state(resume_dir);
  // model.init_from: the source's shape becomes the model section (config.yaml records it); a
  // resume has its own weights and ignores it.
  if (!cfg.model.init_from.empty() && resumed) {
    s.say(fmt::format("[train] model.init_from='{}' is not used: resuming from {} instead",
                      cfg.model.init_from, resume_dir.string()));
  } else if (!cfg.model.init_from.empty()) {
    init.emplace(cfg.model.init_from, "model.init_from");
    for (const auto& note : init->apply_shape(cfg.model)) s.say("[train] model.init_from: " + note);
    cfg.validate();
  }
}

void prepare_output_dir(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  const bool lead = s.lead;
  const auto& out_dir = s.out_dir;
  const auto& cache_dir = s.cache_dir;
  world.group()->barrier({"resume"});  // every rank has read before rank 0 touches output_dir
  // Rank 0 alone writes output_dir; a failure there (or in any rank-0-only step below) stops
  // every rank with one line instead of a hang or a page of c10d frames on the others.
  std::string lock_warning;
  dist::agree_on_failure(*world.group(), "preparing training.output_dir", [&] {
    if (!lead) return;
    s.dir_lock.emplace(out_dir, t.overwrite_output_dir, &lock_warning);
    std::error_code ec;
    fs::create_directories(cache_dir, ec);
    FSDPP_CHECK_AS(ConfigError, !ec, "[train] the cache directory '{}' (data.cache_dir) cannot be "
                   "created: {}", cache_dir.string(), ec.message());
    state::cleanup_stale_tmp(out_dir);  // what a killed save left
    write_file_atomically(out_dir / "config.yaml", cfg.to_yaml(), "train");
  });
  if (!lock_warning.empty()) s.say(lock_warning);
}

}  // namespace fsdpp::train::detail
