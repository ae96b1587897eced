// train() (custom_model.h): a user's module, loss and data through the phases of fsdpp-train
// (phases.h), as the run model CustomRun (run_model.h): the data are the user's sources, the
// model the user's module with its plan; the module and its loss sit behind the CausalLM that
// the other phases shard, step, evaluate and checkpoint.
#include <set>
#include <string>
#include <utility>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/plan_description.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/train/custom_model.h"
#include "config_read.h"
#include "fits_check.h"
#include "phases.h"
#include "wrap_classes.h"

namespace fsdpp::train {
namespace detail {
namespace {

// The modules of `module` whose class is one of `classes` (the blocks).
int64_t count_blocks(torch::nn::Module& module, const std::vector<std::string>& classes) {
  int64_t n = 0;
  for (const auto& m : module.modules(/*include_self=*/false)) {
    for (const auto& c : classes) {
      if (module_class_is(*m, c)) {
        ++n;
        break;
      }
    }
  }
  return n;
}

// A custom module without a plan of its own: its loss is the user's, its blocks the wrapped
// classes; it has no pipeline cut and no tensor-parallel plan (train() refuses those degrees
// before the run, parallelize would refuse them here).
class DataParallelPlan final : public models::ModelPlan {
 public:
  DataParallelPlan(const CustomModel& model, std::shared_ptr<torch::nn::Module> module,
                   std::vector<std::string> blocks)
      : model_(model), module_(std::move(module)), blocks_(std::move(blocks)) {}
  torch::nn::Module& module() override { return *module_; }
  std::string name() const override { return fmt::format("custom model '{}'", model_.name); }
  models::StageLoss loss(const at::Tensor& inputs, const at::Tensor& targets) override {
    return {model_.loss(*module_, Batch{inputs, targets, {}}), {}};
  }
  int64_t pipeline_units() const override { FSDPP_THROW(ConfigError, "{}", no_plan()); }
  std::string describe_pipeline_units() const override { return no_plan(); }
  std::vector<models::ModelStage> split(const std::vector<int>&) override {
    FSDPP_THROW(ConfigError, "{}", no_plan());
  }
  std::vector<std::string> block_classes() const override { return blocks_; }
  tp::TensorParallel apply_tensor_parallel(const models::TensorParallelSpec&) override {
    FSDPP_THROW(ConfigError, "{}", no_plan());
  }

 private:
  std::string no_plan() const {
    return fmt::format("[train] custom model '{}' has no plan of its layers (CustomModel::plan)",
                       model_.name);
  }
  const CustomModel& model_;
  std::shared_ptr<torch::nn::Module> module_;
  std::vector<std::string> blocks_;
};

// The user's module behind the interface the phases drive; forward is its plan's loss. What
// only a language model has (features, samples, a vocabulary) throws: the keys that would ask
// for it are refused before the run.
class CustomLM : public models::CausalLM {
 public:
  CustomLM(const CustomModel& model, std::shared_ptr<torch::nn::Module> module,
           std::shared_ptr<models::ModelPlan> plan, std::vector<std::string> blocks)
      : model_(model), module_(std::move(module)), plan_(std::move(plan)), blocks_(std::move(blocks)) {}
  torch::nn::Module& module() override { return *module_; }
  const char* architecture() const override { return "custom"; }
  models::CausalLMOutput forward(const at::Tensor& inputs, const at::Tensor& targets,
                                 const at::Tensor& positions = {}) override {
    FSDPP_CHECK_AS(ConfigError, !positions.defined(),
                   "[train] custom model '{}' got token positions (document masking), which only "
                   "fsdpp's language models read; expected batches without positions",
                   model_.name);
    models::CausalLMOutput out;
    out.loss = plan_->loss(inputs, targets).loss;
    FSDPP_CHECK(out.loss.defined() && out.loss.numel() == 1 && out.loss.is_floating_point(),
                "[train] the loss function of custom model '{}' returned {}; expected a "
                "floating-point scalar (the batch's mean loss)",
                model_.name, out.loss.defined() ? fmt::format("a tensor of shape {}", out.loss.sizes().vec())
                                                : std::string("an undefined tensor"));
    return out;
  }
  models::CausalLMOutput forward_features(const at::Tensor&, bool, const std::vector<int64_t>&,
                                          const at::Tensor& = {}) override {
    FSDPP_THROW(Error, "[train] custom model '{}' is not a language model: it has no features", model_.name);
  }
  at::Tensor generate(const at::Tensor&, const models::GenerateOptions&) override {
    FSDPP_THROW(Error, "[train] custom model '{}' is not a language model: it does not generate", model_.name);
  }
  std::string describe() const override {
    return fmt::format("custom model '{}' ({})", model_.name, module_class_name(*module_));
  }
  int64_t vocab_size() const override { return 0; }
  const InitPlan& init_plan() const override {
    FSDPP_THROW(Error, "[train] custom model '{}' has no initialisation plan (model.deferred_init)", model_.name);
  }
  int64_t hidden_size() const override { return 0; }
  int64_t num_layers() const override { return count_blocks(*module_, blocks_); }
  std::string config_json() const override {
    nlohmann::json j;
    j["architecture"] = "custom";
    j["name"] = model_.name;
    j["module"] = module_class_name(*module_);
    j["num_parameters"] = models::num_parameters(*module_);
    return j.dump(2);
  }
  // A checkpoint of another model (fsdpp-train's, or another custom one) is refused by name
  // before its tensors are read.
  void check_same_model(const std::string& saved, const std::string& source) const override {
    std::string arch, name;
    try {
      const auto j = nlohmann::json::parse(saved);
      arch = j.value("architecture", "llama");
      name = j.value("name", "");
    } catch (const nlohmann::json::exception&) {
      return;  // the loader names what does not fit
    }
    FSDPP_CHECK_AS(ConfigError, arch == "custom" && name == model_.name,
                   "[train] {} describes {}, not custom model '{}': resume a checkpoint of this "
                   "model (CustomModel::name '{}')",
                   source, arch == "custom" ? fmt::format("custom model '{}'", name)
                                            : fmt::format("fsdpp-train's {} model", arch),
                   model_.name, model_.name);
  }

 private:
  const CustomModel& model_;
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<models::ModelPlan> plan_;
  std::vector<std::string> blocks_;
};

// What a custom model cannot have: the key, its value and what is accepted.
void refuse(bool set, const std::string& key, const std::string& value, const std::string& why) {
  FSDPP_CHECK_AS(ConfigError, !set,
                 "[config] {}={} is not available for a custom model (fsdpp::train::train): {}. "
                 "A custom model trains data parallel (training.fsdp full_shard, shard_grad_op, "
                 "zero1, no_shard, hybrid_shard or hybrid_shard_zero2, with "
                 "parallelism.data_parallel_replicate_degree and data_parallel_shard_degree), "
                 "and with a plan of its layers (CustomModel::plan, parallel::sequential_plan) "
                 "tensor and pipeline parallel (docs/custom-models.md#parallelism)",
                 key, value, why);
}

// The degrees a custom model's plan decides: without one, tensor and pipeline parallelism have
// no layers to split or cut.
void check_parallel_keys(const TrainConfig& cfg, bool has_plan) {
  const auto& p = cfg.parallelism;
  const std::string plans = "it splits or cuts the model's layers by a plan of them, and the custom "
                            "model has none: give CustomModel::plan (parallel::sequential_plan "
                            "for a torch::nn::Sequential)";
  refuse(!has_plan && p.tensor_parallel_degree != 1, "parallelism.tensor_parallel_degree",
         std::to_string(p.tensor_parallel_degree), plans);
  refuse(!has_plan && p.enable_sequence_parallel, "parallelism.enable_sequence_parallel", "true", plans);
  refuse(!has_plan && p.pipeline_parallel_degree != 1, "parallelism.pipeline_parallel_degree",
         std::to_string(p.pipeline_parallel_degree), plans);
}

// The keys about fsdpp-train's language models, refused by name (validate_run does not read
// them); expert parallelism needs experts, which no custom plan places.
void check_custom_keys(const TrainConfig& cfg) {
  refuse(cfg.parallelism.expert_parallel_degree != 1, "parallelism.expert_parallel_degree",
         std::to_string(cfg.parallelism.expert_parallel_degree),
         "expert parallelism places a mixture of experts' experts (fsdpp-train's Qwen3-MoE), "
         "which a custom model's plan does not have");
  refuse(!cfg.model.init_from.empty(), "model.init_from", cfg.model.init_from,
         "it loads fsdpp-train's language models; load your weights in CustomModel::make");
  refuse(cfg.distillation.enabled(), "distillation.teacher",
         cfg.distillation.teacher.empty() ? cfg.distillation.teacher_cache : cfg.distillation.teacher,
         "distillation compares a language model's logits with a teacher's");
}

// The estimate's model of the module as this rank will hold it (estimate/plan_description.h):
// the units FSDP will make of its stages under the config's wrap policy, each parameter the
// plan's tensor-parallel slice, then FSDP over the data-parallel ranks. Activations are not known
// without running it: the check covers the parameters, gradients, optimizer state and the
// gathered units, and says so.
ConfiguredEstimate custom_estimate(const TrainSession& s, models::ModelPlan& plan, int microbatches) {
  const auto& p = s.cfg.parallelism;
  ConfiguredEstimate ce;
  if (s.dims.tensor_parallel() && !plan.tensor_parallel_splits()) {
    ce.skip = fmt::format("the plan of custom model '{}' does not say which parameters tensor "
                          "parallelism splits (ModelPlan::tensor_parallel_splits)", plan.name());
    return ce;
  }
  ce.model = describe_plan_rank(plan, s.cfg.wrap_policy(),
                                {.dims = s.dims,
                                 .rank = s.world.rank(),
                                 .schedule = std::string(p.pipeline_parallel_schedule.name()),
                                 .microbatches = microbatches,
                                 .layers_per_stage = static_cast<int>(p.pipeline_parallel_layers_per_stage)});
  ce.options = plan_rank_options(s.cfg.estimate_options(s.dims), s.dims);
  const std::string layout =
      s.dims.pipeline_parallel() || s.dims.tensor_parallel()
          ? fmt::format(" (this rank's {}{}{}, FSDP over {} data-parallel rank(s))",
                        s.dims.pipeline_parallel() ? fmt::format("stage(s) of pp {}", s.dims.pp) : "",
                        s.dims.pipeline_parallel() && s.dims.tensor_parallel() ? ", " : "",
                        s.dims.tensor_parallel() ? fmt::format("slices of tp {}", s.dims.tp) : "", s.dims.dp())
          : "";
  ce.notes.push_back(fmt::format(
      "{} units, {:.4f} M parameters{}; a custom model's activations are not estimated (the check "
      "covers its parameters, gradients, optimizer state and gathered units{})",
      ce.model.units.size(), static_cast<double>(ce.model.num_params()) / 1e6, layout,
      s.dims.pipeline_parallel() ? ", one unit gathered at a time: a pipeline's gathering for the whole step is not modelled" : ""));
  return ce;
}

void check_custom_config(const TrainConfig& cfg, const CustomModel& model, const TrainData& data) {
  FSDPP_CHECK_AS(ConfigError, model.make && (model.loss || model.plan),
                 "[train] CustomModel '{}' needs make (the module factory) and loss (or a plan, "
                 "whose loss it is)", model.name);
  FSDPP_CHECK_AS(ConfigError, !(model.loss && model.plan),
                 "[train] CustomModel '{}' has both loss and plan: the plan's loss is the model's "
                 "(ModelPlan::loss, a pipeline's last stage); unset CustomModel::loss", model.name);
  FSDPP_CHECK_AS(ConfigError, static_cast<bool>(data.train),
                 "[train] TrainData has no training source (TrainData::train)");
  check_custom_keys(cfg);
  check_parallel_keys(cfg, static_cast<bool>(model.plan));
}

// train()'s model and data (run_model.h), in place of the model: and data: sections.
class CustomRun final : public RunModel {
 public:
  CustomRun(CustomModel model, TrainData data) : model_(std::move(model)), data_(std::move(data)) {}
  // The module's units are known once it is made: build_model checks the cut against them.
  void check_layout(TrainSession&) const override {}
  void prepare_data(TrainSession& s) const override;
  void build_model(TrainSession& s) const override;
  // float32 from the root under mixed precision, for the user's loss and targets.
  std::optional<at::ScalarType> root_output_dtype() const override { return at::kFloat; }
  double flops_per_token(const TrainSession&) const override { return 0; }  // no estimate

 private:
  CustomModel model_;
  TrainData data_;
};

void CustomRun::prepare_data(TrainSession& s) const {
  const auto& data = data_;
  const SourceOptions o = s.share(/*shuffle=*/true);
  s.batches = data.train(o);
  FSDPP_CHECK_AS(ConfigError, s.batches && s.batches->per_rank() >= 1,
                 "[train] the training source gives no examples to data-parallel rank {} of {}",
                 o.rank, o.world_size);
  // A batch that wraps around the rank's share repeats its examples within one step.
  const int64_t batch = s.cfg.training.per_device_train_batch_size;
  FSDPP_CHECK_AS(ConfigError, batch <= s.batches->per_rank(),
                 "[train] training.per_device_train_batch_size={} is larger than the {} examples "
                 "the training source gives each of the {} data-parallel ranks per epoch; use a "
                 "batch of at most {} (or more data, or fewer ranks)",
                 batch, s.batches->per_rank(), o.world_size, s.batches->per_rank());
  if (data.eval) {
    // Made once here, so that evaluation data that cannot serve every rank stops the run before
    // its first step rather than at its first evaluation.
    auto eval = data.eval(s.share(/*shuffle=*/false));
    FSDPP_CHECK_AS(ConfigError, eval && eval->per_rank() >= 1,
                   "[train] the evaluation source gives no examples to data-parallel rank {} of {}",
                   o.rank, o.world_size);
    s.eval_batches = data.eval;
  }
  s.say(fmt::format("[train] data: {}; {} examples per rank per epoch", data.description,
                    s.batches->per_rank()));
}

void CustomRun::build_model(TrainSession& s) const {
  const auto& model = model_;
  const auto& t = s.cfg.training;
  torch::manual_seed(t.seed);  // the same initial weights on every rank, and in every run
  auto module = model.make();
  FSDPP_CHECK_AS(ConfigError, module != nullptr, "[train] CustomModel '{}': make returned no module", model.name);
  // The classes units and checkpointing are made of must be there (wrap_classes.h).
  const auto& fc = t.fsdp_config;
  if (const auto missing = missing_wrap_class(s.cfg, *module)) {
    FSDPP_THROW(ConfigError,
                "[train] training.fsdp_config.fsdp_transformer_layer_cls_to_wrap names '{}', "
                "which is no module class below custom model '{}' ({}); its classes are [{}]. "
                "Name the repeated blocks in CustomModel::blocks (or in that key), or set "
                "training.fsdp_config.fsdp_auto_wrap_policy=NO_WRAP and "
                "training.gradient_checkpointing=false",
                missing->name, model.name, module_class_name(*module), missing->classes);
  }
  if (model.plan) {
    s.plan = model.plan(module);
    FSDPP_CHECK_AS(ConfigError, s.plan && &s.plan->module() == module.get(),
                   "[train] CustomModel '{}': plan returned {}; expected the plan of the module "
                   "it was given", model.name, s.plan ? "the plan of another module" : "no plan");
  } else {
    s.plan = std::make_shared<DataParallelPlan>(model, module, fc.transformer_layer_cls_to_wrap);
  }
  // The cut and the schedule on this model's units, under the keys that set them.
  const int microbatches =
      s.dims.pipeline_parallel() ? pipeline_microbatches(s.cfg, s.dims, parallel::pipeline_units_of(*s.plan)) : 1;
  // Built whole already (on every rank, as train() documents): what is left to check is the step.
  check_run_fits(s, [&] { return custom_estimate(s, *s.plan, microbatches); }, /*builds_whole=*/false);
  s.lm = std::make_unique<CustomLM>(model, std::move(module), s.plan, fc.transformer_layer_cls_to_wrap);
  s.say(fmt::format("[train] model: {}: {:.4f} M parameters", s.lm->describe(),
                    models::num_parameters(s.lm->module()) / 1e6));
}

}  // namespace
}  // namespace detail

TrainConfig custom_config(const std::string& yaml, const std::vector<std::string>& overrides) {
  auto cfg = detail::read_config(yaml, overrides, "the custom model's config");
  detail::check_custom_keys(cfg);  // the parallelism: degrees are checked with the model, by train()
  cfg.validate_run();  // the model: and data: sections are fsdpp-train's model's, not read here
  return cfg;
}

CustomModel sequential_model(std::function<torch::nn::Sequential()> make,
                             parallel::SequentialPlanOptions options) {
  CustomModel model;
  model.name = options.name;
  model.blocks = options.blocks;
  model.make = [make = std::move(make)] { return std::shared_ptr<torch::nn::Module>(make().ptr()); };
  model.plan = [options = std::move(options)](std::shared_ptr<torch::nn::Module> module) {
    auto seq = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module);
    FSDPP_CHECK_AS(ConfigError, seq != nullptr,
                   "[train] sequential_model '{}': make returned a {}, not a torch::nn::Sequential",
                   options.name, module ? module_class_name(*module) : std::string("null module"));
    return parallel::sequential_plan(torch::nn::Sequential(seq), options);
  };
  return model;
}

TrainResult train(TrainConfig config, std::shared_ptr<dist::World> world, CustomModel model,
                  TrainData data, TrainerHooks hooks) {
  detail::check_custom_config(config, model, data);  // before anything, the world included
  FSDPP_CHECK(world != nullptr, "[train] train() needs a world (fsdpp::dist::init_from_env())");
  // The model: and data: sections are fsdpp-train's model's: a key set there (model.dim=...
  // on the command line, data.path=...) does nothing here, and is said to do nothing.
  std::vector<std::string> ignored = config.keys_set_in("model");
  for (auto& k : config.keys_set_in("data")) ignored.push_back(std::move(k));
  auto& fc = config.training.fsdp_config;
  if (!model.blocks.empty() &&
      fc.transformer_layer_cls_to_wrap == TrainConfig{}.training.fsdp_config.transformer_layer_cls_to_wrap) {
    fc.transformer_layer_cls_to_wrap = model.blocks;
  }
  // The model: and data: sections are not this run's: they are not validated (the module's shape
  // is its plan's to check), and the module is made whole (model.deferred_init draws
  // fsdpp-train's models from their initialisation plan).
  config.model.deferred_init = DeferredInit::OFF;
  config.validate_run();
  const std::string model_name = model.name;
  const detail::CustomRun run(std::move(model), std::move(data));
  detail::TrainSession s(config, std::move(world), hooks, run);
  if (!ignored.empty()) {
    s.say(fmt::format("[train] warning: {} {} set, but fsdpp::train::train trains custom model "
                      "'{}' on its own data and reads no model: or data: key: {} ignored",
                      fmt::join(ignored, ", "), ignored.size() == 1 ? "is" : "are",
                      model_name, ignored.size() == 1 ? "it is" : "they are"));
  }
  return detail::run_phases(s);
}

}  // namespace fsdpp::train
