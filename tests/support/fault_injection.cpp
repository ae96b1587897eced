#include "fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/common/whole_number.h"

namespace fsdpp::testing {

FaultPlan FaultPlan::from_env() {
  FaultPlan plan;
  if (const char* text = std::getenv("FSDPP_FAULT_KILL"); text && *text) {
    const std::string_view s(text);
    const auto colon = s.find(':');
    const auto r = colon == std::string_view::npos ? std::nullopt : parse_whole_number(s.substr(0, colon));
    const auto step = colon == std::string_view::npos ? std::nullopt : parse_whole_number(s.substr(colon + 1));
    FSDPP_CHECK_AS(ConfigError, r && step && *r >= 0 && *step >= 1,
                   "[train] FSDPP_FAULT_KILL='{}': expected RANK:STEP such as 1:5 (rank >= 0, "
                   "step >= 1)",
                   text);
    plan.kill_rank = *r;
    plan.kill_step = *step;
  }
  if (const char* text = std::getenv("FSDPP_FAULT_NAN"); text && *text) {
    const std::string_view s(text);
    const auto colon = s.find(':');
    const auto step = parse_whole_number(s.substr(0, colon));
    FSDPP_CHECK_AS(ConfigError, step && *step >= 1 && (colon == std::string_view::npos || colon + 1 < s.size()),
                   "[train] FSDPP_FAULT_NAN='{}': expected STEP or STEP:PARAMETER such as 3 or "
                   "3:layers.0.attention.wq.weight (step >= 1)",
                   text);
    plan.nan_step = *step;
    if (colon != std::string_view::npos) plan.nan_param = std::string(s.substr(colon + 1));
  }
  if (const char* text = std::getenv("FSDPP_FAULT_SAVE_DELAY_MS"); text && *text) {
    const auto ms = parse_whole_number(text);
    FSDPP_CHECK_AS(ConfigError, ms && *ms >= 0,
                   "[train] FSDPP_FAULT_SAVE_DELAY_MS='{}': expected a whole number of milliseconds "
                   ">= 0 such as 400",
                   text);
    plan.save_delay_ms = *ms;
  }
  if (const char* text = std::getenv("FSDPP_FAULT_SAVE_FAIL"); text && *text) {
    const auto r = parse_whole_number(text);
    FSDPP_CHECK_AS(ConfigError, r && *r >= 0,
                   "[train] FSDPP_FAULT_SAVE_FAIL='{}': expected a rank such as 1 (>= 0)", text);
    plan.save_fail_rank = *r;
  }
  return plan;
}

std::function<void(int rank, const std::string& file)> save_fault_hook(const FaultPlan& plan) {
  if (plan.save_delay_ms <= 0 && !plan.save_fail_rank) return {};
  return [delay = plan.save_delay_ms, fail = plan.save_fail_rank](int rank, const std::string& file) {
    if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    if (fail == rank) {
      FSDPP_THROW(CheckpointError, "[state] '{}': write failed (FSDPP_FAULT_SAVE_FAIL={} injected it)",
                  file, rank);
    }
  };
}

train::TrainerHooks fault_hooks(const FaultPlan& plan) {
  train::TrainerHooks hooks;
  if (plan.nan_step && plan.nan_param.empty()) {
    hooks.after_loss = [step = *plan.nan_step](const train::StepContext& c, torch::Tensor& loss) {
      if (c.step == step && c.rank == 0) loss = loss * std::nan("");
    };
  }
  if ((plan.nan_step && !plan.nan_param.empty()) || plan.kill_step) {
    hooks.after_backward = [plan](const train::StepContext& c) {
      if (plan.nan_step == c.step && !plan.nan_param.empty()) inject_nan_grad(c.model, plan.nan_param);
      // Only on the first attempt: the job fsdpp-run restarts must get past the kill.
      if (plan.kill_step == c.step && plan.kill_rank == c.rank && c.restart_count == 0) {
        kill_self(c.rank, c.step);
      }
    };
  }
  hooks.before_checkpoint_write = save_fault_hook(plan);
  return hooks;
}

void inject_nan_grad(torch::nn::Module& model, const std::string& name) {
  torch::NoGradGuard no_grad;
  const auto params = model.named_parameters();  // find() points into it: keep it alive
  const auto* p = params.find(name);
  FSDPP_CHECK_AS(ConfigError, p != nullptr,
                 "[train] FSDPP_FAULT_NAN names parameter '{}', which the model does not have", name);
  if (p->grad().defined()) p->grad().fill_(std::nan(""));
}

void kill_self(int rank, int64_t step) {
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  std::fprintf(stderr, "[fault] FSDPP_FAULT_KILL: rank %d sends itself SIGKILL at step %lld (t=%.3f)\n",
               rank, static_cast<long long>(step), now);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();  // SIGKILL cannot be caught; this only keeps the compiler's promise
}

}  // namespace fsdpp::testing
