#include "fsdpp/train/memory_check.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/estimate/llama_shape.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp::train {
namespace {

// "VmSize:   123 kB" -> bytes; 0 when the field is missing.
int64_t proc_status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  }
  return 0;
}

int64_t meminfo_bytes(const char* field) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  }
  return -1;
}

// cgroup v2's limit and usage for this process's group; -1 when unlimited or unknown.
int64_t cgroup_headroom() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  if (path.empty()) return -1;
  const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
  std::ifstream max_in(dir + "/memory.max"), cur_in(dir + "/memory.current");
  std::string max_text;
  int64_t current = 0;
  if (!(max_in >> max_text) || max_text == "max" || !(cur_in >> current)) return -1;
  try {
    return std::max<int64_t>(0, std::stoll(max_text) - current);
  } catch (const std::exception&) {
    return -1;
  }
}

std::string gib(int64_t b) { return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1ll << 30)); }

// The estimate of `cfg`'s model (a vocabulary of `vocab`) on the options `o` give: the pipeline's
// microbatches, the teacher, what the estimate does not model.
ConfiguredEstimate configured_estimate_on(const TrainConfig& cfg, int64_t vocab, EstimateOptions o) {
  ConfiguredEstimate out;
  const bool llama = cfg.model.architecture == ModelArchitecture::LLAMA;
  out.model = llama ? describe_decoder(decoder_shape_of(cfg.llama_config(vocab)))
                    : describe_decoder(decoder_shape_of(cfg.qwen3_moe_config(vocab)));
  out.options = std::move(o);
  out.options.optimizer_state_on_disk = !cfg.training.fsdp_config.offload_optimizer_state_dir.empty();
  // Pipeline: a step's per-rank sequences (batch x accumulation) go through the stages as
  // microbatches of pipeline_parallel_microbatch_size (the trainer's pipeline_step).
  const auto& p = cfg.parallelism;
  if (p.pipeline_parallel_degree > 1) {
    auto& pp = out.options.pipeline;
    const int64_t step_batch = cfg.training.per_device_train_batch_size * cfg.training.gradient_accumulation_steps;
    pp.degree = static_cast<int>(p.pipeline_parallel_degree);
    pp.schedule = p.pipeline_parallel_schedule.name();
    pp.layers_per_stage = static_cast<int>(p.pipeline_parallel_layers_per_stage);
    pp.microbatches = static_cast<int>(step_batch / std::max<int64_t>(1, p.pipeline_parallel_microbatch_size));
    out.options.batch = step_batch;
    const auto& traits = traits_of(cfg.training.fsdp);
    if (cfg.training.gradient_checkpointing || traits.keep_unsharded_between_steps ||
        cfg.training.fsdp_config.offload_params)
      out.skip = "pipeline parallelism with gradient checkpointing, offload or ZERO1 is not modelled by "
                 "fsdpp-estimate yet";
  }
  // Distillation: the teacher's shape from its directory (weights unread), its dtype; gathered
  // and computed in float32 (the trainer runs on the CPU: teacher.h).
  if (cfg.distillation.live_teacher()) {
    out.options.teacher = EstimateOptions::Teacher{
        describe_teacher(cfg.distillation.teacher, out.model.shape->vocab_size),
        cfg.distillation.teacher_dtype == distill::TeacherDtype::BFLOAT16 ? EstimateDType::BF16 : EstimateDType::FP32,
        EstimateDType::FP32};
  }
  const auto& fc = cfg.training.fsdp_config;
  const std::string layer = decoder_layer_class(llama ? ModelArchitecture::LLAMA
                                                     : ModelArchitecture::QWEN3_MOE);
  if (fc.auto_wrap_policy != AutoWrapPolicy::TRANSFORMER_BASED_WRAP ||
      fc.transformer_layer_cls_to_wrap != std::vector<std::string>{layer}) {
    out.notes.push_back(fmt::format("units taken as one per {} plus the root (the "
                                    "config's wrap policy {} is not modelled)",
                                    layer, fc.auto_wrap_policy));
  }
  return out;
}

}  // namespace

int64_t configured_vocab(const TrainConfig& cfg, std::vector<std::string>& notes) {
  const auto& d = cfg.data;
  if (d.tokenizer_is("byte")) return 256;
  if (d.tokenizer_is("sentencepiece") && d.tokenizer_model.empty()) {
    if (cfg.model.vocab_size == 0) {
      notes.push_back(fmt::format("vocabulary taken as data.tokenizer_vocab_size={}",
                                  d.tokenizer_vocab_size));
    }
    return d.tokenizer_vocab_size;
  }
  return data::make_tokenizer(d.tokenizer_is("sentencepiece") ? d.tokenizer_model : d.tokenizer)
      ->vocab_size();
}

ConfiguredEstimate configured_estimate(const TrainConfig& cfg, int64_t vocab,
                                       const parallel::ParallelDims& dims) {
  return configured_estimate_on(cfg, vocab, cfg.estimate_options(dims));
}

ConfiguredEstimate configured_estimate(const TrainConfig& cfg, int64_t vocab) {
  EstimateOptions o = cfg.estimate_options();
  // Experts split over ep and sharded over efsdp = dp_shard x tp / ep (parallelize's sparse
  // mesh), the rest over dp_shard.
  o.expert_parallel = static_cast<int>(cfg.parallelism.expert_parallel_degree);
  return configured_estimate_on(cfg, vocab, o);
}

ModelDescription describe_teacher(const std::string& path, int64_t vocab) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return describe_model_directory(path);
  FSDPP_CHECK_AS(ConfigError, fs::is_regular_file(path, ec),
                 "[train] teacher '{}' is neither a model directory (an fsdpp checkpoint or a Hugging Face "
                 "model directory) nor an fsdpp-train YAML config", path);
  const TrainConfig cfg = TrainConfig::from_file(path);
  return cfg.model.architecture == ModelArchitecture::LLAMA
             ? describe_decoder(decoder_shape_of(cfg.llama_config(vocab)))
             : describe_decoder(decoder_shape_of(cfg.qwen3_moe_config(vocab)));
}

MemoryHeadroom memory_headroom(int local_world_size) {
  const int n = std::max(1, local_world_size);
  MemoryHeadroom h{std::numeric_limits<int64_t>::max(), ""};
  auto consider = [&](int64_t bytes, std::string why) {
    if (bytes >= 0 && bytes < h.bytes) h = {bytes, std::move(why)};
  };
  if (const int64_t avail = meminfo_bytes("MemAvailable"); avail >= 0) {
    consider(avail / n, fmt::format("the node's available memory ({}) shared by {} local rank(s)",
                                    gib(avail), n));
  }
  if (const int64_t cg = cgroup_headroom(); cg >= 0) {
    consider(cg / n, fmt::format("the cgroup's memory.max headroom ({}) shared by {} local rank(s)",
                                 gib(cg), n));
  }
  // The kernel's own limits on this process: its address space (RLIMIT_AS: every mapping) and
  // its data (RLIMIT_DATA: private writable mappings, where malloc's memory lives).
  for (const auto& [resource, field, name] :
       {std::tuple{RLIMIT_AS, "VmSize", "the address-space limit (ulimit -v"},
        std::tuple{RLIMIT_DATA, "VmData", "the data limit (ulimit -d"}}) {
    rlimit lim{};
    if (::getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) continue;
    const int64_t used = proc_status_bytes(field);
    consider(std::max<int64_t>(0, static_cast<int64_t>(lim.rlim_cur) - used),
             fmt::format("{}: {}, {} of it used already)", name,
                         gib(static_cast<int64_t>(lim.rlim_cur)), gib(used)));
  }
  return h;
}

void check_memory_fits(const MemoryEstimate& e, int64_t whole_model_bytes,
                       int local_world_size) {
  const MemoryHeadroom h = memory_headroom(local_world_size);
  if (h.limited_by.empty()) return;
  // What is resident now (LibTorch, the data) is already part of the estimate's runtime.
  const int64_t resident = proc_status_bytes("VmRSS");
  const int64_t peak = std::max(e.total, whole_model_bytes + e.runtime);
  if (peak - resident <= h.bytes) return;
  const bool whole_sets_peak = whole_model_bytes + e.runtime > e.total;
  FSDPP_THROW(ConfigError,
              "[train] this run needs an estimated {} per rank (the step's peak: {} = parameters "
              "{}, gradients {}, optimizer state {}, gathered units {}, activations {}, at {}{}), "
              "but this process can get at most {} more: {}. {}Use more ranks or nodes, "
              "FULL_SHARD, training.gradient_checkpointing, mixed precision, a smaller batch or "
              "model (fsdpp-estimate CONFIG --budget GB recommends one); "
              "training.skip_memory_check=true skips this check",
              gib(peak), gib(e.total), gib(e.parameters), gib(e.gradients),
              gib(e.optimizer_state), gib(e.unsharded), gib(e.activations), e.peak_at,
              whole_model_bytes > 0
                  ? fmt::format("; the model built whole in fp32 before it is sharded: {}",
                                gib(whole_model_bytes))
                  : std::string(),
              gib(h.bytes), h.limited_by,
              whole_sets_peak ? "Building the whole model sets the peak: model.deferred_init=exact "
                                "(the default) makes only this rank's shards. "
                              : "");
}

void check_device_memory_fits(const MemoryEstimate& e, int64_t free_bytes, int64_t total_bytes,
                              const std::string& device) {
  if (e.tensors <= free_bytes) return;
  FSDPP_THROW(ConfigError,
              "[train] this run needs an estimated {} of tensors per rank on {} (the step's peak: "
              "parameters {}, gradients {}, optimizer state {}, gathered units {}, activations "
              "{}, at {}), but the device has {} free of {}. Use more GPUs, FULL_SHARD, "
              "training.gradient_checkpointing, training.bf16, fsdp_offload_params, a smaller "
              "batch or model (fsdpp-estimate CONFIG --budget GB recommends one); "
              "training.skip_memory_check=true skips this check",
              gib(e.tensors), device, gib(e.parameters), gib(e.gradients), gib(e.optimizer_state),
              gib(e.unsharded), gib(e.activations), e.peak_at, gib(free_bytes), gib(total_bytes));
}

}  // namespace fsdpp::train
