// fsdpp-train's checkpoints. See checkpointer.h and docs/training.md.
#include "checkpointer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/string_collectives.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/observe/metrics_log.h"
#include "fsdpp/state/async_save.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/state_dict.h"
#include "elapsed.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace fsdpp::train::detail {
namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kB64[(v >> (6 * k)) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string unbase64(const std::string& in, const std::string& what) {
  auto val = [&](char c) -> int {
    const char* p = std::strchr(kB64, c);
    FSDPP_CHECK_AS(ConfigError, c != '\0' && p != nullptr, "[train] {}: not base64 (character '{}')", what, c);
    return static_cast<int>(p - kB64);
  };
  FSDPP_CHECK_AS(ConfigError, in.size() % 4 == 0, "[train] {}: not base64 (length {})", what, in.size());
  std::string out;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=') {
        ++pad;
        v <<= 6;
      } else {
        v = (v << 6) | static_cast<uint32_t>(val(c));
      }
    }
    out.push_back(static_cast<char>((v >> 16) & 255));
    if (pad < 2) out.push_back(static_cast<char>((v >> 8) & 255));
    if (pad < 1) out.push_back(static_cast<char>(v & 255));
  }
  return out;
}

std::string state_bytes(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor t = gen.get_state();
  return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

void set_state_bytes(at::Generator gen, const std::string& bytes) {
  auto t = at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions(at::kByte));
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
}

json rng_json(const RngState& r) {
  json cuda = json::array();
  for (const auto& c : r.cuda) cuda.push_back(base64(c));
  return {{"cpu", base64(r.cpu)}, {"cuda", cuda}};
}

RngState rng_from_json(const json& j, const std::string& what) {
  RngState r;
  r.cpu = unbase64(j.at("cpu").get<std::string>(), what + " rng.cpu");
  if (j.contains("cuda")) {
    for (const auto& c : j.at("cuda")) r.cuda.push_back(unbase64(c.get<std::string>(), what + " rng.cuda"));
  }
  return r;
}

bool same_schedule(const LrSchedule& a, const LrSchedule& b) {
  return a.type == b.type && a.base_lr == b.base_lr && a.warmup_steps == b.warmup_steps &&
         a.total_steps == b.total_steps && a.min_lr_ratio == b.min_lr_ratio;
}

bool skip_buffer(const std::string& name) { return models::is_non_persistent_buffer(name); }

// data.path as trainer_state.json records it: the same file spelled "data/x.txt" or
// "./data/../data/x.txt" must compare equal on resume.
std::string resolved_data_path(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : p.string();
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& out_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return found;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    constexpr std::string_view kPrefix = "checkpoint-";
    if (name.rfind(kPrefix, 0) != 0 || name.size() == kPrefix.size()) continue;
    const std::string digits = name.substr(kPrefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) continue;
    if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (!fs::is_regular_file(e.path() / kTrainerStateFile, ec)) continue;
    found.emplace_back(std::stoll(digits), e.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

RngState capture_rng() {
  RngState r;
  r.cpu = state_bytes(at::detail::getDefaultCPUGenerator());
  if (at::hasCUDA()) {
    for (size_t i = 0; i < at::getNumGPUs(); ++i) {
      r.cuda.push_back(state_bytes(
          at::globalContext().defaultGenerator(at::Device(at::kCUDA, static_cast<int8_t>(i)))));
    }
  }
  return r;
}

void restore_rng(const RngState& r) {
  set_state_bytes(at::detail::getDefaultCPUGenerator(), r.cpu);
  if (!r.cuda.empty() && at::hasCUDA()) {
    const size_t n = std::min(r.cuda.size(), at::getNumGPUs());
    for (size_t i = 0; i < n; ++i) {
      set_state_bytes(at::globalContext().defaultGenerator(at::Device(at::kCUDA, static_cast<int8_t>(i))),
                      r.cuda[i]);
    }
  }
}

std::string trainer_state_to_json(const TrainerState& s) {
  json j;
  j["format"] = "fsdpp.trainer_state";
  j["version"] = kTrainerStateVersion;
  j["step"] = s.step;
  j["epoch"] = s.epoch;
  j["windows_consumed"] = s.windows_consumed;
  j["world_size"] = s.world_size;
  j["state_dict_type"] = s.state_dict_type;
  if (s.schedule) {
    j["lr_schedule"] = {{"type", s.schedule->type},
                        {"base_lr", s.schedule->base_lr},
                        {"warmup_steps", s.schedule->warmup_steps},
                        {"total_steps", s.schedule->total_steps},
                        {"min_lr_ratio", s.schedule->min_lr_ratio},
                        {"lr", s.lr}};
  }
  json cpu = json::array(), cuda = json::array();
  for (const auto& r : s.rng) {
    const json one = rng_json(r);
    cpu.push_back(one["cpu"]);
    cuda.push_back(one["cuda"]);
  }
  j["rng"] = {{"cpu", cpu}, {"cuda", cuda}};
  if (s.grad_scaler) {
    j["grad_scaler"] = {{"scale", s.grad_scaler->scale},
                        {"growth_tracker", s.grad_scaler->growth_tracker}};
  }
  if (s.seed) j["seed"] = *s.seed;
  if (s.data_path) j["data_path"] = *s.data_path;
  if (s.seq_len) j["seq_len"] = *s.seq_len;
  if (s.teacher) j["teacher"] = *s.teacher;
  if (s.metrics_digest) j["metrics_xxh3"] = *s.metrics_digest;
  return j.dump(2) + "\n";
}

TrainerState trainer_state_from_json(const std::string& text, const std::string& path) {
  // A value no save writes: the run would go on from it (step -5 ran steps -4.. and saved
  // checkpoint-0), so it is refused naming the field.
  auto check = [&](bool ok, const std::string& field, const auto& value, const char* expected) {
    FSDPP_CHECK_AS(ConfigError, ok, "[train] '{}' is not a valid trainer state: {} is {}; expected {}",
                   path, field, value, expected);
  };
  try {
    const json j = json::parse(text);
    FSDPP_CHECK_AS(ConfigError, j.is_object(), "[train] '{}' is not a valid trainer state: expected a "
                   "JSON object", path);
    if (j.contains("format")) {
      const auto format = j.at("format").get<std::string>();
      check(format == "fsdpp.trainer_state", "format", format, "fsdpp.trainer_state");
    }
    if (j.contains("version")) {
      const auto version = j.at("version").get<int64_t>();
      const std::string known = fmt::format("a version this build reads (1 to {})", kTrainerStateVersion);
      check(version >= 1 && version <= kTrainerStateVersion, "version", version, known.c_str());
    }
    TrainerState s;
    s.step = j.at("step").get<int64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.windows_consumed = j.at("windows_consumed").get<int64_t>();
    s.world_size = j.at("world_size").get<int64_t>();
    s.state_dict_type = j.value("state_dict_type", std::string());
    check(s.step >= 0, "step", s.step, "a step >= 0");
    check(s.epoch >= 0, "epoch", s.epoch, "an epoch >= 0");
    check(s.windows_consumed >= 0, "windows_consumed", s.windows_consumed, "a count >= 0");
    check(s.world_size >= 1, "world_size", s.world_size, "a number of ranks >= 1");
    check(s.state_dict_type.empty() || s.state_dict_type == "FULL" || s.state_dict_type == "SHARDED" ||
              s.state_dict_type == "LOCAL",
          "state_dict_type", "'" + s.state_dict_type + "'", "FULL, SHARDED or LOCAL");
    if (j.contains("lr_schedule")) {
      const auto& l = j.at("lr_schedule");
      LrSchedule sch;
      sch.type = l.at("type").get<std::string>();
      sch.base_lr = l.at("base_lr").get<double>();
      sch.warmup_steps = l.at("warmup_steps").get<int64_t>();
      sch.total_steps = l.at("total_steps").get<int64_t>();
      sch.min_lr_ratio = l.at("min_lr_ratio").get<double>();
      s.schedule = sch;
      s.lr = l.at("lr").get<double>();
      check(config::Choice<LrSchedulerType>::find(sch.type).has_value(), "lr_schedule.type",
            "'" + sch.type + "'", "cosine, linear or constant");
      check(std::isfinite(sch.base_lr) && sch.base_lr > 0, "lr_schedule.base_lr", sch.base_lr,
            "a finite number > 0");
      check(sch.warmup_steps >= 0, "lr_schedule.warmup_steps", sch.warmup_steps, "a number >= 0");
      check(sch.total_steps >= 1, "lr_schedule.total_steps", sch.total_steps, "a number >= 1");
      check(std::isfinite(sch.min_lr_ratio) && sch.min_lr_ratio >= 0 && sch.min_lr_ratio <= 1,
            "lr_schedule.min_lr_ratio", sch.min_lr_ratio, "a ratio in [0, 1]");
      check(std::isfinite(s.lr) && s.lr >= 0, "lr_schedule.lr", s.lr, "a finite number >= 0");
    }
    if (j.contains("rng")) {
      const auto& cpu = j.at("rng").at("cpu");
      const json cuda = j.at("rng").value("cuda", json::array());
      for (size_t q = 0; q < cpu.size(); ++q) {
        json one = {{"cpu", cpu[q]}, {"cuda", q < cuda.size() ? cuda[q] : json::array()}};
        s.rng.push_back(rng_from_json(one, path));
      }
    }
    if (j.contains("grad_scaler")) {
      const auto& g = j.at("grad_scaler");
      s.grad_scaler = GradScalerState{g.at("scale").get<double>(),
                                      g.at("growth_tracker").get<int64_t>()};
      check(std::isfinite(s.grad_scaler->scale) && s.grad_scaler->scale > 0, "grad_scaler.scale",
            s.grad_scaler->scale, "a finite number > 0");
      check(s.grad_scaler->growth_tracker >= 0, "grad_scaler.growth_tracker",
            s.grad_scaler->growth_tracker, "a count >= 0");
    }
    if (j.contains("seed")) s.seed = j.at("seed").get<uint64_t>();
    if (j.contains("data_path")) s.data_path = j.at("data_path").get<std::string>();
    if (j.contains("seq_len")) {
      s.seq_len = j.at("seq_len").get<int64_t>();
      check(*s.seq_len >= 1, "seq_len", *s.seq_len, "a number of tokens >= 1");
    }
    if (j.contains("teacher")) s.teacher = j.at("teacher").get<std::string>();
    if (j.contains("metrics_xxh3")) s.metrics_digest = j.at("metrics_xxh3").get<std::string>();
    return s;
  } catch (const json::exception& e) {
    FSDPP_THROW(ConfigError, "[train] '{}' is not a valid trainer state: {}", path, e.what());
  }
}

TrainerState read_trainer_state(const fs::path& dir) {
  const fs::path path = dir / kTrainerStateFile;
  struct stat st {};
  FSDPP_CHECK_AS(ConfigError, ::stat(path.c_str(), &st) == 0,
                 "[train] '{}' is not a complete checkpoint: it has no {} (a save that did not finish?)",
                 dir.string(), kTrainerStateFile);
  // Before opening it: a FIFO would block the open forever, a directory reads as empty text.
  FSDPP_CHECK_AS(ConfigError, S_ISREG(st.st_mode), "[train] '{}' is not a regular file; expected the "
                 "checkpoint's trainer state (JSON)", path.string());
  std::ifstream in(path);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[train] cannot read '{}': {}", path.string(),
                 std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  TrainerState s = trainer_state_from_json(text.str(), path.string());
  // Every rank's CPU generator state, tried on a scratch generator: LibTorch's own error for a
  // state of another size or an invalid one is a stack trace naming neither file nor rank.
  for (size_t q = 0; q < s.rng.size(); ++q) {
    try {
      set_state_bytes(at::make_generator<at::CPUGeneratorImpl>(), s.rng[q].cpu);
    } catch (const c10::Error& e) {
      FSDPP_THROW(ConfigError,
                  "[train] '{}': rng.cpu[{}] (rank {}'s CPU generator, {} bytes) is not a generator "
                  "state this build of LibTorch can restore: {}",
                  path.string(), q, q, s.rng[q].cpu.size(), e.what_without_backtrace());
    }
  }
  return s;
}

struct Checkpointer::State {
  CheckpointOptions options;
  std::shared_ptr<dist::World> world;
  const models::CausalLM* model = nullptr;
  std::unique_ptr<state::AsyncSaver> saver;  // training.async_save
  fs::path pending_dir;                       // the background save in flight
  const ShardedGradScaler* scaler = nullptr;  // fp16
  std::map<std::string, std::string> extra_files;  // add_files(): written into every checkpoint
  std::function<void(int, const std::string&)> before_write;  // set_before_write()
  std::vector<torch::nn::Module*> parts;  // set_parts(): a pipelined run's stages
  int64_t last_saved = 0;

  bool lead() const { return world->rank() == 0; }
  void say(const std::string& line) const {
    if (!lead()) return;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  // Waits for the background save in flight and says how it went (throws its error).
  void wait_async() {
    if (!saver || !saver->in_flight()) return;
    const auto t0 = Clock::now();
    saver->wait();
    say(fmt::format("[train] saved {} in the background ({:.1f} ms of writing; training waited "
                    "{:.1f} ms for it here)",
                    pending_dir.string(), saver->last_write_ms(), ms_since(t0)));
  }
};

Checkpointer::Checkpointer(CheckpointOptions options, std::shared_ptr<dist::World> world,
                           const models::CausalLM& model)
    : s_(std::make_unique<State>()) {
  s_->options = std::move(options);
  s_->world = std::move(world);
  s_->model = &model;
  torch::manual_seed(s_->options.seed);
  if (s_->options.async_save) {
    s_->saver = std::make_unique<state::AsyncSaver>(s_->world->group(), s_->world->store());
  }
}

Checkpointer::~Checkpointer() = default;

void Checkpointer::check_resume_compatible(const fs::path& dir, const TrainerState& ts) const {
  const auto& s = *s_;
  const auto& o = s.options;
  const fs::path config_path = dir / kModelConfigFile;
  std::optional<uint64_t> saved_config_seed;  // checkpoints before version 3 keep it there only
  std::error_code ec;
  if (fs::is_regular_file(config_path, ec)) {
    // The weights mean something else under another value of some keys (rope theta, heads,
    // experts per token), though every shape still fits: resuming would go on training another
    // model. (Shapes are the loader's to compare: it names the tensor.)
    const std::string text = read_text_file(config_path);
    s.model->check_same_model(text, config_path.string());
    try {
      const auto j = nlohmann::json::parse(text);
      if (j.is_object() && j.contains("seed") && j["seed"].is_number_unsigned()) {
        saved_config_seed = j["seed"].get<uint64_t>();
      }
    } catch (const nlohmann::json::exception&) {
    }
  }
  // Optimizer state: a checkpoint made by fsdpp-train always has it; one that lacks it (made by
  // another tool, or pruned by hand) would silently restart AdamW's moments.
  // (Without index.json the loader reads a bare model.safetensors, which has none; an index that
  // is not a readable JSON file is the loader's to report, naming it.)
  const fs::path index_path = dir / "index.json";
  bool has_optim = fs::exists(fs::symlink_status(index_path, ec));
  if (fs::is_regular_file(index_path, ec)) {
    try {
      const auto index = nlohmann::json::parse(read_text_file(index_path));
      has_optim = !index.is_object() || index.contains("optim");
    } catch (const nlohmann::json::exception&) {
    }
  }
  if (!has_optim) {
    s.say(fmt::format("[train] warning: {} holds no optimizer state: AdamW starts afresh at step {} "
                      "(zero moments, step count 0) instead of continuing the saved run's",
                      dir.string(), ts.step + 1));
  }
  // What the saved data position (epoch, windows consumed) refers to. Another order, file
  // or window size is a legitimate choice (fine-tuning on other data), so these warn; the
  // position is still applied, to the new order.
  const std::string position =
      fmt::format("the saved data position (epoch {}, {} windows consumed) is applied to", ts.epoch,
                  ts.windows_consumed);
  const auto saved_seed = ts.seed ? ts.seed : saved_config_seed;
  if (saved_seed && *saved_seed != o.seed) {
    s.say(fmt::format("[train] warning: training.seed={} differs from the checkpoint's {} ({}): {} "
                      "another shuffle, so this epoch's remaining windows are not the ones the "
                      "saved run had left",
                      o.seed, *saved_seed, dir.string(), position));
  }
  if (ts.data_path && *ts.data_path != resolved_data_path(o.data_path)) {
    s.say(fmt::format("[train] warning: data.path='{}' differs from the checkpoint's '{}' ({}): {} "
                      "the new data",
                      o.data_path, *ts.data_path, dir.string(), position));
  }
  // The loss itself: a teacher added, changed or dropped changes what the steps optimise. As
  // legitimate as other data (a second phase of distillation), so a warning.
  const auto& teacher = o.teacher;
  const std::string teacher_now = teacher.empty() ? "" : resolved_data_path(teacher);
  if (ts.teacher && *ts.teacher != teacher_now) {
    const std::string from = fmt::format("from step {} the loss is", ts.step + 1);
    if (ts.teacher->empty()) {
      s.say(fmt::format("[train] warning: {} was trained without a distillation teacher; {} "
                        "distilled from distillation.teacher='{}'",
                        dir.string(), from, teacher));
    } else if (teacher_now.empty()) {
      s.say(fmt::format("[train] warning: {} was distilled from '{}' and this run has no "
                        "distillation.teacher: {} the cross-entropy alone",
                        dir.string(), *ts.teacher, from));
    } else {
      s.say(fmt::format("[train] warning: distillation.teacher='{}' differs from the checkpoint's "
                        "'{}' ({}): {} distilled from another teacher",
                        teacher, *ts.teacher, dir.string(), from));
    }
  }
  if (ts.seq_len && *ts.seq_len != o.seq_len) {
    s.say(fmt::format("[train] warning: data.seq_len={} differs from the checkpoint's {} ({}): {} "
                      "windows of {} tokens instead of {}",
                      o.seq_len, *ts.seq_len, dir.string(), position, o.seq_len,
                      *ts.seq_len));
  }
}

void Checkpointer::restore(const fs::path& dir, const TrainerState& ts, torch::nn::Module& model,
                           torch::optim::Optimizer& opt, const LrSchedule& schedule) {
  auto& world = *s_->world;
  // Every rank reads the same files and reaches the same verdict, so an error here stops all
  // of them before the first collective of the load.
  check_resume_compatible(dir, ts);
  state::LoadOptions lo;
  lo.skip_buffer = skip_buffer;
  if (s_->parts.empty()) {
    state::load_state_dict(dir, model, &opt, world.group(), lo);
  } else {
    state::load_state_dict(dir, s_->parts, &opt, world.group(), lo);
  }
  s_->last_saved = ts.step;  // nothing to save again before the steps after it
  const auto rank = static_cast<size_t>(world.rank());
  if (rank < ts.rng.size()) {
    try {
      restore_rng(ts.rng[rank]);
    } catch (const c10::Error& e) {  // a CUDA state read_trainer_state could not try out
      FSDPP_THROW(ConfigError, "[train] '{}': rank {}'s generator state cannot be restored: {}",
                  (dir / kTrainerStateFile).string(), rank, e.what_without_backtrace());
    }
  }
  if (ts.rng.empty()) {
    s_->say("[train] the checkpoint holds no generator states (an older version saved it): the "
            "generators stay seeded from training.seed");
  } else if (static_cast<int64_t>(ts.rng.size()) > world.size()) {
    s_->say(fmt::format("[train] generator states: ranks 0..{} restored; the checkpoint's states "
                        "of ranks {}..{} are not used on {} rank(s)",
                        world.size() - 1, world.size(), ts.rng.size() - 1, world.size()));
  } else if (static_cast<int64_t>(ts.rng.size()) < world.size()) {
    s_->say(fmt::format("[train] generator states: ranks 0..{} restored; ranks {}..{} have none "
                        "saved and stay seeded from training.seed",
                        ts.rng.size() - 1, ts.rng.size(), world.size() - 1));
  }
  if (ts.schedule && !same_schedule(*ts.schedule, schedule)) {
    // Say so only when a learning rate still to come changes.
    for (int64_t k = ts.step + 1; k <= schedule.total_steps; ++k) {
      if (schedule.at(k) == ts.schedule->at(k)) continue;
      s_->say(fmt::format("[train] note: the learning-rate schedule differs from the checkpoint's "
                          "({} lr {} warmup {} over {} steps then; {} lr {} warmup {} over {} "
                          "steps now): from step {} the learning rate follows the new one ({:.6g} "
                          "instead of {:.6g})",
                          ts.schedule->type, ts.schedule->base_lr, ts.schedule->warmup_steps,
                          ts.schedule->total_steps, schedule.type, schedule.base_lr,
                          schedule.warmup_steps, schedule.total_steps, k, schedule.at(k),
                          ts.schedule->at(k)));
      break;
    }
  }
}

void Checkpointer::save(int64_t step, torch::nn::Module& model, torch::optim::Optimizer& opt,
                        const data::SamplerState& sampler, const LrSchedule& schedule) {
  auto& s = *s_;
  auto& world = *s.world;
  const auto& o = s.options;
  const fs::path& out_dir = o.output_dir;
  const fs::path dir = out_dir / fmt::format("checkpoint-{}", step);
  torch::optim::Optimizer* optimizer = o.save_only_model ? nullptr : &opt;
  const auto t0 = Clock::now();
  s.wait_async();  // a new save waits for the previous one (and reports its error)
  const double waited_ms = ms_since(t0);
  TrainerState ts;
  ts.step = step;
  ts.epoch = sampler.epoch;
  // Windows over all data-parallel ranks (the ranks of a tp group read the same ones).
  ts.windows_consumed = sampler.position * o.dp;
  ts.world_size = world.size();
  ts.schedule = schedule;
  if (s_->scaler && s_->scaler->is_enabled()) ts.grad_scaler = s_->scaler->state();
  ts.lr = schedule.at(step);
  ts.seed = o.seed;
  ts.data_path = resolved_data_path(o.data_path);
  ts.seq_len = o.seq_len;
  ts.teacher = o.teacher.empty() ? "" : resolved_data_path(o.teacher);
  if (s.lead()) ts.metrics_digest = observe::metrics_digest(out_dir / "metrics.jsonl");
  state::SaveOptions so = o.layout;
  so.skip_buffer = skip_buffer;
  so.before_write = s.before_write;
  ts.state_dict_type = state::to_string(so.type);
  // Every rank's generators: the ones of later ranks may differ (per-rank draws).
  const RngState mine = capture_rng();
  std::string packed = base64(mine.cpu);
  for (const auto& c : mine.cuda) packed += "|" + base64(c);
  for (const auto& p : dist::all_gather_strings(*world.group(), packed, {"trainer_state"})) {
    RngState r;
    std::stringstream in(p);
    std::string part;
    bool first = true;
    while (std::getline(in, part, '|')) {
      (first ? r.cpu : r.cuda.emplace_back()) = unbase64(part, "generator state");
      first = false;
    }
    ts.rng.push_back(std::move(r));
  }
  so.extra_files = s.extra_files;
  so.extra_files[kTrainerStateFile] = trainer_state_to_json(ts);
  so.extra_files[kModelConfigFile] = s.model->config_json();

  // Rank 0, after the directory is in place: the oldest complete checkpoints beyond the limit go.
  auto prune = [out_dir, limit = o.save_total_limit] {
    if (limit <= 0) return;
    auto found = list_checkpoints(out_dir);
    const int64_t extra = static_cast<int64_t>(found.size()) - limit;
    for (int64_t i = 0; i < extra; ++i) state::remove_tree(found[i].second);
  };
  if (s.saver) {
    if (s.parts.empty()) {
      s.saver->save(dir, model, optimizer, so, prune);
    } else {
      s.saver->save(dir, s.parts, optimizer, so, prune);
    }
    s.pending_dir = dir;
    s.last_saved = step;
    s.say(fmt::format("[train] checkpoint-{} (async): training blocked {:.1f} ms (waited {:.1f} ms "
                      "for the previous save, state copied in {:.1f} ms); writing {} in the "
                      "background",
                      step, ms_since(t0), waited_ms, s.saver->last_snapshot_ms(), dir.string()));
    return;
  }
  if (s.parts.empty()) {
    state::save_state_dict(dir, model, optimizer, world.group(), so);
  } else {
    state::save_state_dict(dir, s.parts, optimizer, world.group(), so);
  }
  s.last_saved = step;
  if (s.lead()) prune();
  s.say(fmt::format("[train] checkpoint-{} (sync): training blocked {:.1f} ms; saved {}", step,
                    ms_since(t0), dir.string()));
}

void Checkpointer::finish() { s_->wait_async(); }

bool Checkpointer::save_due(int64_t step) const {
  const auto& o = s_->options;
  if (o.strategy == SaveStrategy::STEPS) return o.save_steps > 0 && step % o.save_steps == 0;
  if (o.strategy == SaveStrategy::EPOCH) return step % o.steps_per_epoch == 0;
  return false;
}

int64_t Checkpointer::last_saved() const { return s_->last_saved; }

void Checkpointer::set_parts(std::vector<torch::nn::Module*> parts) { s_->parts = std::move(parts); }

void Checkpointer::track_grad_scaler(const ShardedGradScaler* scaler) { s_->scaler = scaler; }

void Checkpointer::set_before_write(std::function<void(int rank, const std::string& file)> hook) {
  s_->before_write = std::move(hook);
}

void Checkpointer::add_files(std::map<std::string, std::string> files) {
  for (auto& [name, text] : files) s_->extra_files[name] = std::move(text);
}

}  // namespace fsdpp::train::detail
