// finish (phases.h): the last step's save (unless save_strategy is no or a signal stopped the
// run), the wait for an asynchronous save, then the closing lines and the sample text.
#include <cmath>
#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/data/printable_text.h"
#include "phases.h"
#include "sample_hold.h"

namespace fsdpp::train::detail {

TrainResult finish(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  const bool lead = s.lead;
  const auto& out_dir = s.out_dir;
  const auto& tokenizer = s.tokenizer;
  const int64_t first_step = s.first_step;
  const int64_t total_steps = s.steps.total_steps;
  const double val_loss = s.val_loss;
  TrainResult& result = s.result;
  s.reporter->end_steps();
  if (t.save_strategy != SaveStrategy::NO && result.stopped_by_signal == 0 && result.steps > s.checkpointer->last_saved()) {
    save_checkpoint(s, result.steps);  // the final model
  }
  s.checkpointer->finish();  // an asynchronous save still being written: wait, report its error
  s.reporter->report_end(result.steps);  // the run's picture beside metrics.jsonl
  result.final_val_loss = val_loss;
  auto stopped = [&](const char* when) {
    const auto saved = list_checkpoints(out_dir);
    s.say(fmt::format("[train] stopped by {} {} step {} of {}; {}", strsignal(result.stopped_by_signal),
                      when, result.steps, total_steps,
                      saved.empty() ? std::string("no checkpoint was saved")
                                    : fmt::format("the newest checkpoint is {}", saved.back().second.string())));
    return result;
  };
  if (result.stopped_by_signal != 0) return stopped("after");
  if (first_step > total_steps) {
    s.say(fmt::format("[train] nothing to train: resumed at step {} and the run has {} steps "
                      "(raise training.max_steps or num_train_epochs to go on)",
                      first_step - 1, total_steps));
    return result;
  }

  // Text from the trained model, the same on every rank (one generator seed).
  if (t.sample_tokens > 0 && tokenizer) {  // a language model (train()'s models have no tokenizer)
    auto prompt_ids = tokenizer->encode(t.sample_prompt);
    if (prompt_ids.empty()) prompt_ids.push_back(0);
    auto prompt = torch::tensor(std::vector<int64_t>(prompt_ids.begin(), prompt_ids.end()), torch::kLong);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(t.seed + 1);  // the same on every rank
    torch::NoGradGuard no_grad;
    models::GenerateOptions go;
    go.max_new_tokens = t.sample_tokens;
    go.temperature = t.sample_temperature;
    go.top_k = t.sample_top_k;
    go.allowed_vocab = tokenizer->vocab_size();  // model.vocab_size may have rows beyond it
    go.generator = gen;
    // A heartbeat per token, and a stop signal honoured every 8 tokens (one small all-reduce:
    // every rank stops at the same token), so that neither waits for the whole sample.
    int64_t made = 0;
    go.stop = [&](const at::Tensor&) {
      s.reporter->beat(fmt::format("sampling after step {}: token {} of {}", result.steps, ++made,
                                   t.sample_tokens));
      return made % 8 == 0 && stop_requested(s);
    };
    at::Tensor ids;
    {
      const SampleHold hold(s);
      s.say(fmt::format("[train] sampling {} tokens: {}", t.sample_tokens, hold.how()));
      ids = s.pipelined() ? pipeline_generate(s, prompt, go) : s.lm->generate(prompt, go);
    }
    // Cut short: only the callback above stops early, and every rank agreed on it.
    if (ids.size(-1) < static_cast<int64_t>(prompt_ids.size()) + t.sample_tokens) {
      result.stopped_by_signal = s.stop_signal->received() != 0 ? s.stop_signal->received() : SIGTERM;
      return stopped("during the sample after");
    }
    auto tail = ids.narrow(0, static_cast<int64_t>(prompt_ids.size()), t.sample_tokens).to(torch::kInt);
    std::vector<int32_t> v(tail.data_ptr<int32_t>(), tail.data_ptr<int32_t>() + tail.numel());
    result.sample = t.sample_prompt + tokenizer->decode(v);
    if (lead) write_file_atomically(out_dir / "sample.txt", result.sample + "\n", "train");
    s.say("[train] sample:\n" + data::printable_text(result.sample) + "\n");
  }
  // A run without evaluation data (train() given no TrainData::eval) has no validation loss.
  s.say(fmt::format("[train] done: {} steps, final loss {:.4f}{}", result.steps, result.final_loss,
                    std::isfinite(result.final_val_loss)
                        ? fmt::format(", validation loss {:.4f}", result.final_val_loss)
                        : std::string(", no validation data")));
  const int64_t last_saved = s.checkpointer->last_saved();
  s.say(fmt::format("[train] metrics: {}  config: {}{}{}", (out_dir / "metrics.jsonl").string(),
                    (out_dir / "config.yaml").string(),
                    t.sample_tokens > 0 && tokenizer ? "  sample: " + (out_dir / "sample.txt").string() : "",
                    last_saved > 0
                        ? "  checkpoint: " + (out_dir / fmt::format("checkpoint-{}", last_saved)).string()
                        : ""));
  return result;
}

}  // namespace fsdpp::train::detail
