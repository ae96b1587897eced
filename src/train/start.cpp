// choose_start and prepare_output_dir (phases.h): where the run starts from (a checkpoint, or
// model.init_from's source and its shape), and rank 0's hold on output_dir.
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/state/atomic_dir.h"
#include "phases.h"
#include "restart_count.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

// Whether this run continues the one whose files output_dir holds: a restart of the same job, or
// a resume from one of its checkpoints.
bool continues_earlier_run(const TrainSession& s) {
  if (s.restart_count > 0) return true;
  std::error_code ec;
  return !s.resume_dir.empty() && fs::equivalent(s.resume_dir.parent_path(), s.out_dir, ec);
}

// Rank 0, holding output_dir: an earlier run there is refused, unless this run continues it or
// training.overwrite_output_dir says to replace it (then it is removed, and the note says so).
std::string take_over_earlier_run(const TrainSession& s) {
  const auto& t = s.cfg.training;
  const auto earlier = find_earlier_run(s.out_dir);
  if (earlier.empty() || continues_earlier_run(s)) return "";
  std::string why = "a new run there would overwrite its checkpoints and metrics or mix with "
                    "them. Resume it with training.resume_from_checkpoint=latest, choose";
  if (!s.resume_dir.empty()) {
    why = fmt::format("this run resumes from {}, elsewhere, and would mix the two. Choose",
                      s.resume_dir.string());
  } else if (t.resume_from_checkpoint == "latest") {
    why = "it has no complete checkpoint to resume from, and a new run would mix with it. Choose";
  }
  FSDPP_CHECK_AS(ConfigError, t.overwrite_output_dir,
                 "[train] training.output_dir='{}' holds an earlier run ({}): {} another "
                 "output_dir, or set training.overwrite_output_dir=true to replace it",
                 s.out_dir.string(), earlier.describe(), why);
  remove_earlier_run(s.out_dir, earlier);
  return fmt::format("[train] training.overwrite_output_dir=true: removed the earlier run in {} "
                     "({})",
                     s.out_dir.string(), earlier.describe());
}


// Puts the source's architecture and shape into `m` and returns, for each key the YAML set
// otherwise, a note "model.dim: 128 in the config, 32 in DIR".
std::vector<std::string> take_shape_of(const models::ModelSource& source, ModelSection& m) {
  const auto& dir = source.dir();
  std::vector<std::string> notes;
  auto take = [&](const char* k, auto& field, auto value) {
    if (field != value) {
      notes.push_back(fmt::format("model.{}: {} in the config, {} in {}", k, field, value,
                                  dir.string()));
    }
    field = value;
  };
  const auto arch = source.architecture() == models::Architecture::kQwen3Moe
                        ? ModelArchitecture::QWEN3_MOE
                        : ModelArchitecture::LLAMA;
  if (m.architecture != arch) {
    notes.push_back(fmt::format("model.architecture: {} in the config, {} in {}",
                                m.architecture.name(), config::Choice<ModelArchitecture>(arch).name(),
                                dir.string()));
    m.architecture = arch;
  }
  // 0 means "derived" for some keys (n_heads, Llama's rule, the tokenizer's): not a change.
  std::vector<std::string> derived = {"model.ffn_hidden: 0 ", "model.vocab_size: 0 ",
                                      "model.moe_intermediate_size: 0 ", "model.head_dim: 0 "};
  if (const auto& moe = source.qwen3_moe_config()) {
    const auto& c = *moe;
    take("vocab_size", m.vocab_size, c.vocab_size);
    take("dim", m.dim, c.hidden_size);
    take("n_layers", m.n_layers, c.num_hidden_layers);
    take("n_heads", m.n_heads, c.num_attention_heads);
    take("n_kv_heads", m.n_kv_heads, c.num_key_value_heads);
    take("ffn_hidden", m.ffn_hidden, c.intermediate_size);
    take("head_dim", m.head_dim, c.head_dim);
    take("num_experts", m.num_experts, c.num_experts);
    take("num_experts_per_tok", m.num_experts_per_tok, c.num_experts_per_tok);
    take("moe_intermediate_size", m.moe_intermediate_size, c.moe_intermediate_size);
    take("norm_topk_prob", m.norm_topk_prob, c.norm_topk_prob);
    take("router_aux_loss_coef", m.router_aux_loss_coef, c.router_aux_loss_coef);
    take("decoder_sparse_step", m.decoder_sparse_step, c.decoder_sparse_step);
    take("mlp_only_layers", m.mlp_only_layers, c.mlp_only_layers);
    take("max_seq_len", m.max_seq_len, c.max_position_embeddings);
    take("norm_eps", m.norm_eps, c.rms_norm_eps);
    take("rope_theta", m.rope_theta, c.rope_theta);
    take("tie_embeddings", m.tie_embeddings, c.tie_word_embeddings);
    if (c.num_key_value_heads == c.num_attention_heads) derived.push_back("model.n_kv_heads: 0 ");
  } else {
    const auto& c = source.llama_config();
    take("vocab_size", m.vocab_size, c.vocab_size);
    take("dim", m.dim, c.dim);
    take("n_layers", m.n_layers, c.n_layers);
    take("n_heads", m.n_heads, c.n_heads);
    take("n_kv_heads", m.n_kv_heads, c.kv_heads());
    take("ffn_hidden", m.ffn_hidden, c.ffn_hidden_dim());
    take("max_seq_len", m.max_seq_len, c.max_seq_len);
    take("norm_eps", m.norm_eps, c.norm_eps);
    take("rope_theta", m.rope_theta, c.rope_theta);
    take("tie_embeddings", m.tie_embeddings, c.tie_embeddings);
    if (c.kv_heads() == c.n_heads) derived.push_back("model.n_kv_heads: 0 ");
  }
  notes.erase(std::remove_if(notes.begin(), notes.end(),
                             [&](const std::string& n) {
                               return std::any_of(derived.begin(), derived.end(),
                                                  [&](const std::string& d) {
                                                    return n.rfind(d, 0) == 0;
                                                  });
                             }),
              notes.end());
  return notes;
}

}  // namespace

// Every rank resolves the same checkpoint on the shared file system.
void choose_start(TrainSession& s) {
  auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& out_dir = s.out_dir;
  auto& resume_dir = s.resume_dir;
  auto& resumed = s.resumed;
  auto& init = s.init;
  out_dir = t.output_dir;
  if (const auto unused = cfg.unused_keys(); !unused.empty()) {
    std::string keys;
    for (size_t i = 0; i < unused.size(); ++i) keys += (i ? ", " : "") + unused[i];
    s.say(fmt::format("[train] warning: {} {} set but distillation.teacher is not: distillation "
                      "is off, and {} not used",
                      keys, unused.size() == 1 ? "is" : "are", unused.size() == 1 ? "it is" : "they are"));
  }
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
    for (const auto& note : take_shape_of(*init, cfg.model)) s.say("[train] model.init_from: " + note);
    cfg.validate();
  }
  // validate() leaves the shape against the degrees to now when model.init_from decides the
  // shape (config.h): the directory's architecture, or the config's when a resume ignores it.
  if (!cfg.model.init_from.empty()) {
    try {
      cfg.validate_layout();
    } catch (const ConfigError& e) {
      if (!init) throw;
      FSDPP_THROW(ConfigError, "{} (model.init_from='{}' made the model {})", e.what(),
                  cfg.model.init_from, cfg.model.architecture.name());
    }
  }
  // The layout on this world, and what the run model checks of it before it is made (the
  // pipeline's schedule on fsdpp-train's model.n_layers): their errors before output_dir is
  // touched.
  s.dims = parallel_dims(cfg, s.world.size(), s.world.env().local_world_size);
  s.run_model.check_layout(s);
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
  std::string overwrite_note;
  dist::agree_on_failure(*world.group(), "preparing training.output_dir", [&] {
    if (!lead) return;
    s.dir_lock.emplace(out_dir, t.overwrite_output_dir);
    overwrite_note = take_over_earlier_run(s);
    std::error_code ec;
    fs::create_directories(cache_dir, ec);
    FSDPP_CHECK_AS(ConfigError, !ec, "[train] the cache directory '{}' (data.cache_dir) cannot be "
                   "created: {}", cache_dir.string(), ec.message());
    state::cleanup_stale_tmp(out_dir);  // what a killed save left
    write_file_atomically(out_dir / "config.yaml", cfg.to_yaml(), "train");
    s.dir_lock->watch(out_dir / "config.yaml");  // a second job's would replace it
  });
  if (!overwrite_note.empty()) s.say(overwrite_note);
}

}  // namespace fsdpp::train::detail
