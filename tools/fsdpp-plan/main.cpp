// fsdpp-plan: which layout of a cluster trains a model fastest (docs/planner.md). CLI glue only:
// the model of a step is fsdpp/estimate/step_time.h, the memory fsdpp/estimate/memory_estimate.h.
//   fsdpp-plan configs/default.yaml --cluster cpu --world-size 4 --global-batch 8
//   fsdpp-plan Llama-3.1-8B/config.json --cluster h100-sxm-500w --world-size 8 --global-batch 16 \
//       --seq-len 8192 --mixed-precision bf16
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/llama_shape.h"
#include "fsdpp/estimate/plan_answer.h"
#include "fsdpp/estimate/step_time.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/memory_check.h"
#include "fsdpp/train/plan_overrides.h"

namespace {

// A trainer YAML (its model, dtypes and batch), a Hugging Face config.json, or a model directory.
// `run` becomes what the fsdpp-run line trains: the YAML and its overrides, or a config of yours
// starting from the model directory.
fsdpp::ModelDescription read_model(const std::string& path, const std::vector<std::string>& overrides,
                                   fsdpp::EstimateOptions& options, std::vector<std::string>& run) {
  namespace fs = std::filesystem;
  const bool json = fs::path(path).extension() == ".json";
  if (fs::is_directory(path) || json) {
    const std::string dir = json ? fs::path(path).parent_path().string() : path;
    run = {"YOUR_CONFIG.yaml", "model.init_from=" + (dir.empty() ? std::string(".") : dir)};
    return fsdpp::describe_model_directory(dir.empty() ? "." : dir);
  }
  run = {path};
  run.insert(run.end(), overrides.begin(), overrides.end());
  const auto cfg = fsdpp::train::TrainConfig::from_file(path, overrides);
  std::vector<std::string> notes;
  const int64_t vocab = fsdpp::train::configured_vocab(cfg, notes);
  const auto ce = fsdpp::train::configured_estimate(cfg, vocab);
  options = ce.options;
  return ce.model;
}

// The flags' values as given (before any default replaces them).
struct Given {
  int world;
  int64_t global_batch, seq_len;
  double efficiency, memory_gb;
  int top, tp, pp;
};

// Values no cluster or run can have are refused by name (before: a 0 or NaN fell back to the
// preset unsaid, an efficiency of 2 printed 120% MFU, --seq-len -5 became 1 token).
void check_ranges(const CLI::App& app, const Given& g) {
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  FSDPP_CHECK_AS(ConfigError, g.world >= 1 && g.world <= (1 << 20),
                 "[fsdpp-plan] --world-size {}: expected a number of devices in [1, 1048576]", g.world);
  FSDPP_CHECK_AS(ConfigError, g.global_batch >= 1,
                 "[fsdpp-plan] --global-batch {}: expected a number of sequences >= 1", g.global_batch);
  FSDPP_CHECK_AS(ConfigError, !given("--seq-len") || (g.seq_len >= 1 && g.seq_len <= (int64_t{1} << 30)),
                 "[fsdpp-plan] --seq-len {}: expected a number of tokens in [1, 1073741824]", g.seq_len);
  FSDPP_CHECK_AS(ConfigError,
                 !given("--compute-efficiency") ||
                     (std::isfinite(g.efficiency) && g.efficiency > 0 && g.efficiency <= 1),
                 "[fsdpp-plan] --compute-efficiency {}: expected the fraction of the peak the matmuls reach, "
                 "in (0, 1]", g.efficiency);
  FSDPP_CHECK_AS(ConfigError,
                 !given("--memory-gb") || (std::isfinite(g.memory_gb) && g.memory_gb > 0 && g.memory_gb <= 1e6),
                 "[fsdpp-plan] --memory-gb {}: expected a device's memory in GiB, in (0, 1000000]", g.memory_gb);
  FSDPP_CHECK_AS(ConfigError, g.top >= 0, "[fsdpp-plan] --top {}: expected a number of layouts >= 0", g.top);
  FSDPP_CHECK_AS(ConfigError, !given("--tp") || g.tp >= 1, "[fsdpp-plan] --tp {}: expected a degree >= 1", g.tp);
  FSDPP_CHECK_AS(ConfigError, !given("--pp") || g.pp >= 1, "[fsdpp-plan] --pp {}: expected a degree >= 1", g.pp);
}

// The numbers the ranking used, each with where it came from: a flag's value, never the preset's
// when the flag replaced it.
void print_header(const fsdpp::ModelDescription& model, const fsdpp::Cluster& cluster, int world,
                  int64_t global_batch, const fsdpp::EstimateOptions& base) {
  const double n = static_cast<double>(model.num_params());
  std::printf("fsdpp-plan: %.2f %s parameters, %d devices of %s (%s; %.1f GiB each: %s; compute efficiency "
              "%.2f: %s; error band +-%.0f%%: %s), global batch %lld x %lld tokens, %s\n",
              n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? "B" : "M", world, cluster.name.c_str(), cluster.source.c_str(),
              static_cast<double>(cluster.memory_bytes) / 1073741824.0, cluster.memory_from.c_str(),
              cluster.compute_efficiency, cluster.efficiency_from.c_str(), 100 * cluster.error_band,
              cluster.band_from.c_str(), static_cast<long long>(global_batch), static_cast<long long>(base.seq_len),
              fsdpp::to_string(base.param_dtype));
}

// A row's fsdpp-train overrides: for a YAML, those that change it.
using KeysOf = std::function<std::vector<std::string>(const fsdpp::EstimateOptions&)>;

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// A line per layout, fastest first (-> the answer, = a tie with the fastest), and under it the
// fsdpp-train overrides that run it.
void print_rows(const fsdpp::Plan& plan, const fsdpp::PlanAnswer& answer, const fsdpp::Cluster& cluster, int top,
                bool time_only, const KeysOf& keys_of) {
  std::printf("\n     %-44s %9s %10s %6s %9s %5s %6s  %s\n", "layout (fastest first; ->: the answer, =: a tie)",
              "step (s)", "tok/s/dev", "MFU", "mem (GiB)", "eff", "band",
              "compute [experts] + memory-bound + exposed comm (FSDP, TP, EP, PP bubble)");
  for (int i = 0; i < static_cast<int>(plan.fitting.size()) && i < top; ++i) {
    const auto& e = plan.fitting[static_cast<size_t>(i)];
    const auto& t = e.time;
    const bool tie = std::find(answer.ties.begin(), answer.ties.end(), i) != answer.ties.end();
    const std::string experts = t.experts_s > 0 ? fmt::format(" [{:.3f}]", t.experts_s) : "";
    std::printf("  %-2s %-44s %9.3f %10.0f %5.1f%% %9.2f %5.2f %5.0f%%  %.3f%s + %.3f + %.3f, %.3f, %.3f, %.3f\n",
                i == answer.chosen ? "->" : tie ? "=" : "", e.layout.c_str(), t.total_s, t.tokens_per_s_per_device,
                100 * t.mfu, e.memory.total / 1073741824.0, cluster.compute_efficiency,
                100 * fsdpp::error_band(e, cluster), t.compute_s, experts.c_str(), t.memory_bound_s, t.fsdp_exposed_s,
                t.tp_comm_s, t.ep_comm_s, t.pp_bubble_s + t.pp_p2p_s);
    std::printf("       %s\n", joined(keys_of(e.options)).c_str());
  }
  if (plan.fitting.empty()) std::printf("  nothing fits: more devices, a smaller batch, or shorter sequences\n");
  if (time_only) std::printf("  (--time-only: memory not estimated, shown as 0)\n");
}

// The one answer, why, and the command that runs it.
void print_answer(const fsdpp::Plan& plan, const fsdpp::PlanAnswer& answer, int world, const fsdpp::Cluster& cluster,
                  const std::vector<std::string>& run, const KeysOf& keys_of) {
  if (answer.chosen < 0) return;
  const auto& e = plan.fitting[static_cast<size_t>(answer.chosen)];
  std::printf("\n  answer: %s, %.3f s: %s\n  %s\n", e.layout.c_str(), e.time.total_s, answer.why.c_str(),
              fsdpp::train::layout_command(world, cluster.devices_per_node, run.front(),
                                           {run.begin() + 1, run.end()}, keys_of(e.options))
                  .c_str());
}

void write_json(const std::string& path, const fsdpp::Plan& plan, const fsdpp::PlanAnswer& answer,
                const fsdpp::Cluster& cluster, int world, const std::vector<std::string>& run, const KeysOf& keys_of) {
  nlohmann::json j;
  const auto entry = [&](const fsdpp::PlanEntry& e) {
    nlohmann::json r = {{"layout", e.layout}, {"step_s", e.time.total_s},
                        {"tokens_per_s_per_device", e.time.tokens_per_s_per_device}, {"mfu", e.time.mfu},
                        {"compute_s", e.time.compute_s}, {"experts_s", e.time.experts_s},
                        {"expert_ops", e.time.expert_ops},
                        {"memory_bound_s", e.time.memory_bound_s}, {"fsdp_comm_s", e.time.fsdp_comm_s},
                        {"fsdp_exposed_s", e.time.fsdp_exposed_s}, {"tp_comm_s", e.time.tp_comm_s},
                        {"ep_comm_s", e.time.ep_comm_s}, {"pp_bubble_s", e.time.pp_bubble_s},
                        {"memory_bytes", e.memory.total}, {"world_size", e.options.world_size},
                        {"strategy", fsdpp::to_string(e.options.strategy)}, {"tp", e.options.tensor_parallel},
                        {"pp", e.options.pipeline.degree}, {"ep", e.options.expert_parallel},
                        {"checkpointing", e.options.activation_checkpointing},
                        {"batch_per_dp_rank", e.options.batch}, {"rejected", e.rejected}};
    if (e.rejected.empty()) {
      r["error_band"] = fsdpp::error_band(e, cluster);
      r["overrides"] = keys_of(e.options);
    }
    return r;
  };
  j["fitting"] = nlohmann::json::array();
  for (const auto& e : plan.fitting) j["fitting"].push_back(entry(e));
  for (const auto& e : plan.rejected) j["rejected"].push_back(entry(e));
  j["compute_efficiency"] = cluster.compute_efficiency;
  if (answer.chosen >= 0) {
    const auto& e = plan.fitting[static_cast<size_t>(answer.chosen)];
    j["answer"] = {{"index", answer.chosen}, {"layout", e.layout}, {"why", answer.why}, {"ties", answer.ties},
                   {"command", fsdpp::train::layout_command(world, cluster.devices_per_node, run.front(),
                                                            {run.begin() + 1, run.end()}, keys_of(e.options))}};
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  FSDPP_CHECK_AS(ConfigError, f != nullptr, "[estimate] cannot write --json '{}'", path);
  std::fputs(j.dump(1).c_str(), f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdpp-plan: the layouts (FSDP, HSDP, TP, PP, EP, checkpointing) of a cluster that fit a model "
               "in memory, ranked by predicted step time, with tokens/s and MFU, and why the others do not fit. "
               "See docs/planner.md."};
  std::string model_path, cluster_name = "h100-sxm", mixed, json_out;
  std::vector<std::string> overrides;
  int world = 0;
  int64_t global_batch = 0, seq_len = 0;
  double efficiency = 0, memory_gb = 0, op_overhead_us = 0;
  int top = 10;
  bool show_rejected = false, time_only = false;
  std::string only_strategy, checkpointing;
  int only_tp = 0, only_pp = 0;
  std::vector<std::string> schedules = {"1F1B"};
  app.add_option("model", model_path, "fsdpp-train YAML, Hugging Face config.json, or a model directory")->required();
  app.add_option("overrides", overrides, "key.path=value overrides of a YAML config");
  app.add_option("--cluster", cluster_name, "h100-sxm (default), h100-sxm-500w, a100-sxm, cpu");
  app.add_option("--world-size,-n", world, "devices in all")->required();
  app.add_option("--global-batch", global_batch, "sequences per step over all data-parallel ranks")->required();
  app.add_option("--seq-len", seq_len, "tokens per sequence (default: the config's)");
  app.add_option("--mixed-precision", mixed, "bf16 or fp16: parameters gathered and computed in it, gradients reduced in "
                 "float32 (fsdpp-train's training.bf16 / training.fp16)");
  app.add_option("--compute-efficiency", efficiency, "fraction of the peak the matmuls reach (default: the preset's)");
  app.add_option("--memory-gb", memory_gb, "device memory in GiB (default: the preset's)");
  app.add_option("--op-overhead-us", op_overhead_us, "the least time of one eager op in microseconds, which a "
                 "MoE's per-expert kernels pay (default: the preset's)");
  app.add_option("--top", top, "layouts shown (default 10)");
  app.add_flag("--rejected", show_rejected, "also list every rejected layout and why");
  app.add_option("--json", json_out, "write the whole plan as JSON to this file");
  app.add_option("--strategy", only_strategy, "only this data-parallel strategy: full_shard, hybrid_shard, "
                 "shard_grad_op, no_shard");
  app.add_option("--tp", only_tp, "only this tensor-parallel degree");
  app.add_option("--pp", only_pp, "only this pipeline-parallel degree");
  app.add_option("--schedules", schedules, "pipeline schedules to try (default 1F1B), e.g. 1F1B,Interleaved1F1B")
      ->delimiter(',');
  app.add_flag("--time-only", time_only, "time every layout that splits, without the memory estimate (for layouts it "
               "does not model, e.g. PP with TP; docs/planner.md)");
  app.add_option("--checkpointing", checkpointing, "only layouts with (on) or without (off) activation checkpointing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Bad flags are bad input, as the range checks below: exit 2 (CLI11's own codes are > 100).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "[fsdpp-plan] %s; see fsdpp-plan --help\n", e.what());
    return 2;
  }

  try {
    check_ranges(app, {world, global_batch, seq_len, efficiency, memory_gb, top, only_tp, only_pp});
    fsdpp::EstimateOptions base;
    std::vector<std::string> run;
    const fsdpp::ModelDescription model = read_model(model_path, overrides, base, run);
    fsdpp::Cluster cluster = fsdpp::cluster_preset(cluster_name);
    if (app.count("--compute-efficiency") > 0) {
      cluster.compute_efficiency = efficiency;
      cluster.efficiency_from = "--compute-efficiency";
    }
    if (app.count("--op-overhead-us") > 0) {
      FSDPP_CHECK_AS(ConfigError, std::isfinite(op_overhead_us) && op_overhead_us >= 0 && op_overhead_us <= 1e6,
                     "[fsdpp-plan] --op-overhead-us {}: expected microseconds in [0, 1000000]", op_overhead_us);
      cluster.op_overhead_s = op_overhead_us * 1e-6;
    }
    if (app.count("--memory-gb") > 0) {
      cluster.memory_bytes = static_cast<int64_t>(memory_gb * 1024 * 1024 * 1024);
      cluster.memory_from = "--memory-gb";
    }
    if (app.count("--seq-len") > 0) base.seq_len = seq_len;
    // As fsdpp-train's training.bf16 / training.fp16: gathered and computed in it, reduced in float32.
    if (!mixed.empty()) {
      base.param_dtype = fsdpp::parse_estimate_dtype(mixed);
      base.reduce_dtype = fsdpp::EstimateDType::FP32;
    }
    if (cluster.device_is_gpu) base.runtime_baseline_bytes = 0;
    fsdpp::Plan plan = fsdpp::plan_layouts(model, base, cluster, world, global_batch, schedules, !time_only);
    // The restrictions the flags ask for, on both lists.
    FSDPP_CHECK_AS(ConfigError, checkpointing.empty() || checkpointing == "on" || checkpointing == "off",
                   "[estimate] --checkpointing '{}': expected on or off", checkpointing);
    const auto keep = [&](const fsdpp::PlanEntry& e) {
      const auto& o = e.options;
      return (only_strategy.empty() || fsdpp::parse_sharding_strategy(only_strategy) == o.strategy) &&
             (only_tp == 0 || o.tensor_parallel == only_tp) &&
             (only_pp == 0 || std::max(1, o.pipeline.degree) == only_pp) &&
             (checkpointing.empty() || o.activation_checkpointing == (checkpointing == "on"));
    };
    std::erase_if(plan.fitting, [&](const auto& e) { return !keep(e); });
    std::erase_if(plan.rejected, [&](const auto& e) { return !keep(e); });

    const fsdpp::PlanAnswer answer = fsdpp::plan_answer(plan, cluster);
    const bool yaml = run.front() == model_path;
    const KeysOf keys_of = [&](const fsdpp::EstimateOptions& o) {
      return yaml ? fsdpp::train::layout_overrides_for(model_path, overrides, o) : fsdpp::train::layout_overrides(o);
    };
    print_header(model, cluster, world, global_batch, base);
    print_rows(plan, answer, cluster, top, time_only, keys_of);
    print_answer(plan, answer, world, cluster, run, keys_of);
    std::printf("\n  %zu layouts fit, %zu rejected%s\n", plan.fitting.size(), plan.rejected.size(),
                show_rejected ? ":" : " (--rejected lists them)");
    if (show_rejected) {
      for (const auto& e : plan.rejected) std::printf("  x %-44s %s\n", e.layout.c_str(), e.rejected.c_str());
    }
    if (!json_out.empty()) write_json(json_out, plan, answer, cluster, world, run, keys_of);
    return 0;
  } catch (const fsdpp::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
