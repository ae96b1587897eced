// fsdpp-generate CHECKPOINT [--prompt TEXT] [--max-new-tokens N] ...: text from a trained model.
//   fsdpp-generate runs/default/checkpoint-400 --prompt "Q: " --max-new-tokens 200
//   echo "Q: " | fsdpp-run --nproc-per-node 2 fsdpp-generate runs/default/checkpoint-400 --temperature 0
// CHECKPOINT is an fsdpp checkpoint of any layout (its tokenizer travels with it) or a Hugging
// Face directory (config.json + safetensors), of a Llama or a Qwen3-MoE. Under fsdpp-run every
// rank loads its shard (FULL_SHARD, one unit per decoder layer) and rank 0 prints. Flags take
// generate()'s names.
#include <CLI/CLI.hpp>

#include <torch/torch.h>

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/data/printable_text.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/fsdp/deferred_init.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/models/hf_checkpoint.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/state/state_dict.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[generate] cannot read '{}'", p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Loaded {
  std::unique_ptr<fsdpp::models::CausalLM> model;
  std::unique_ptr<fsdpp::data::Tokenizer> tokenizer;
};

// The model of the architecture its files name (a Llama or a Qwen3-MoE, hf_checkpoint.h), made
// without storage, sharded over the world one unit per decoder layer, then each rank's rows read
// from the checkpoint (any layout: it reshards on load) or the Hugging Face files: no rank holds
// the whole model (fsdpp/fsdp/deferred_init.h).
Loaded load(const fs::path& dir, const std::string& tokenizer_flag, fsdpp::dist::World& world) {
  namespace models = fsdpp::models;
  FSDPP_CHECK_AS(ConfigError, fs::is_directory(dir),
                 "[generate] '{}' is not a directory; expected an fsdpp checkpoint "
                 "(checkpoint-<step>) or a Hugging Face model directory",
                 dir.string());
  Loaded out;
  const bool fsdpp_ckpt = fs::exists(dir / "index.json");
  const bool hf = fs::exists(dir / "config.json");
  FSDPP_CHECK_AS(ConfigError, fsdpp_ckpt || hf,
                 "[generate] '{}' has neither index.json (an fsdpp checkpoint) nor config.json "
                 "(a Hugging Face model)",
                 dir.string());
  const fs::path config = dir / (fsdpp_ckpt ? "model_config.json" : "config.json");
  FSDPP_CHECK_AS(ConfigError, fs::exists(config),
                 "[generate] '{}' has no model_config.json (saved by fsdpp-train and "
                 "fsdpp-ckpt import-hf); cannot tell the model's shape",
                 dir.string());
  const std::string text = read_file(config);
  const auto arch = fsdpp_ckpt ? models::architecture_of_model_config(text, config.string())
                               : models::architecture_of_hf_config(text, config.string());
  // Reads this rank's rows of the Hugging Face files into the sharded model.
  std::function<void(torch::nn::Module&)> load_hf_rows;
  const char* layer = "TransformerBlock";
  if (arch == models::Architecture::kQwen3Moe) {
    const auto cfg = models::qwen3_moe_config_from_hf(text, config.string());
    out.model = models::causal_lm(models::Qwen3Moe(cfg, at::kMeta));
    layer = "Qwen3MoeDecoderLayer";
    load_hf_rows = [&dir, cfg](torch::nn::Module& m) { models::load_hf_qwen3_moe_rows(dir, cfg, {&m}); };
  } else {
    const auto cfg = fsdpp_ckpt ? models::llama_config_from_json(text, config.string())
                                : models::llama_config_from_hf(text, config.string());
    out.model = models::causal_lm(models::Llama(cfg, at::kMeta));
    load_hf_rows = [&dir, cfg](torch::nn::Module& m) { models::load_hf_llama_rows(dir, cfg, {&m}); };
  }
  auto& module = out.model->module();
  fsdpp::FullyShardOptions fo;
  fo.mesh = world.mesh();
  fsdpp::apply_fully_shard(module, fsdpp::transformer_layer_policy({layer}), fo);
  fsdpp::to_empty(module, at::kCPU);
  if (!fsdpp_ckpt) {
    fsdpp::dist::agree_on_failure(*world.group(), "loading the Hugging Face weights",
                                  [&] { load_hf_rows(module); });
  } else {
    fsdpp::state::LoadOptions lo;
    lo.skip_buffer = [](const std::string& n) { return models::is_non_persistent_buffer(n); };
    fsdpp::state::load_state_dict(dir, module, nullptr, world.group(), lo);
  }
  const int64_t vocab = out.model->vocab_size();
  if (!tokenizer_flag.empty()) {
    out.tokenizer = fsdpp::data::make_tokenizer(tokenizer_flag);
  } else if (auto t = fsdpp::data::model_tokenizer(dir)) {
    out.tokenizer = std::move(t);
  } else if (vocab == 256) {
    out.tokenizer = std::make_unique<fsdpp::data::ByteTokenizer>();
  } else {
    FSDPP_THROW(ConfigError,
                "[generate] '{}' holds no tokenizer (fsdpp_tokenizer.json, tokenizer.json or tokenizer.model) "
                "and its vocabulary ({}) is not bytes; give --tokenizer byte or --tokenizer "
                "PATH (a tokenizer.json or .model file)",
                dir.string(), vocab);
  }
  FSDPP_CHECK_AS(ConfigError, out.tokenizer->vocab_size() <= vocab,
                 "[generate] the tokenizer has {} tokens but the model only {}",
                 out.tokenizer->vocab_size(), vocab);
  return out;
}

// A flag's number with the range it accepts in words: "nan" is not a negative temperature, and
// "0" is not "out of range [1e-09 - 1]".
CLI::Validator number_in(const std::string& accepted, bool (*ok)(double)) {
  return CLI::Validator(
      [accepted, ok](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || used == 0 || !std::isfinite(v) || !ok(v)) {
          return "expected " + accepted + ", got '" + text + "'";
        }
        return "";
      },
      "");
}

// A flag's whole number in [0, max] with what it means in words (CLI11's NonNegativeNumber printed
// the largest double, 310 digits, as its bound; a uint64_t seed beyond 2^64 saturated unsaid).
CLI::Validator whole_number_in(const std::string& accepted, uint64_t max) {
  return CLI::Validator(
      [accepted, max](std::string& text) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v > max) {
          return "expected " + accepted + ", got '" + text + "'";
        }
        return "";
      },
      "");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdpp-generate: continue a prompt with a trained model (docs/generate.md)"};
  std::string checkpoint, prompt, tokenizer, stop;
  bool have_prompt = false, raw = false, print_ids = false, ignore_eos = false;
  fsdpp::models::GenerateOptions go;
  go.temperature = 0.8;
  uint64_t seed = 0;
  app.add_option("checkpoint", checkpoint, "fsdpp checkpoint (any layout) or Hugging Face directory")
      ->required();
  app.add_option("--prompt", prompt, "text to continue; without it, one prompt per line of stdin")
      ->each([&](const std::string&) { have_prompt = true; });
  app.add_option("--max-new-tokens", go.max_new_tokens, "tokens to generate")->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--temperature", go.temperature, "0: greedy")->capture_default_str()
      ->check(number_in("a finite number in [0, 100] (0: greedy)",
                        [](double v) { return v >= 0 && v <= 100; }));
  app.add_option("--top-k", go.top_k, "sample from the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(whole_number_in("a whole number of tokens >= 0 (0: all)", uint64_t{1} << 40));
  app.add_option("--top-p", go.top_p, "sample from the fewest tokens whose probability reaches p")
      ->capture_default_str()
      ->check(number_in("a probability in (0, 1] (1: every token)",
                        [](double v) { return v > 0 && v <= 1; }));
  app.add_option("--seed", seed, "the sampling generator's seed (every rank uses it)")
      ->capture_default_str()
      ->check(whole_number_in("a whole number in [0, 18446744073709551615]", UINT64_MAX));
  app.add_option("--stop", stop, "stop once the generated text contains this");
  app.add_option("--tokenizer", tokenizer,
                 "byte, a tokenizer.json, a SentencePiece .model, or a directory holding one "
                 "(default: the checkpoint's)");
  app.add_flag("--raw", raw, "print the bytes as generated (default: invalid UTF-8 as \\xNN)");
  app.add_flag("--ids", print_ids, "print the token ids (the prompt's, then the generated) instead of text");
  app.add_flag("--ignore-eos", ignore_eos,
               "go on after the tokenizer's EOS (default: stop there, as transformers' generate)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    auto world = fsdpp::dist::init_from_env();
    const bool lead = world->rank() == 0;
    auto loaded = load(checkpoint, tokenizer, *world);
    std::vector<std::string> prompts;
    if (have_prompt) {
      prompts.push_back(prompt);
    } else {
      // Rank 0 reads stdin (fsdpp-run gives the others none) and shares the lines.
      std::string all;
      if (lead) {
        for (std::string line; std::getline(std::cin, line);) all += line + "\n";
      }
      if (world->size() > 1) {
        auto len = torch::tensor({static_cast<int64_t>(all.size())});
        world->group()->broadcast(len, 0, {"prompts"});
        all.resize(static_cast<size_t>(len.item<int64_t>()));
        auto bytes = torch::empty({static_cast<int64_t>(std::max<size_t>(all.size(), 1))}, torch::kByte);
        if (lead) std::memcpy(bytes.data_ptr(), all.data(), all.size());
        world->group()->broadcast(bytes, 0, {"prompts"});
        all.assign(static_cast<const char*>(bytes.data_ptr()), all.size());
      }
      for (size_t pos = 0; pos < all.size();) {
        const size_t nl = all.find('\n', pos);
        prompts.push_back(all.substr(pos, nl - pos));
        pos = nl == std::string::npos ? all.size() : nl + 1;
      }
    }
    torch::NoGradGuard no_grad;
    for (const auto& p : prompts) {
      auto ids = loaded.tokenizer->encode(p);
      if (ids.empty()) ids.push_back(0);
      auto prompt_ids = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kLong);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);  // the same on every rank
      auto opts = go;
      opts.generator = gen;
      const auto n_prompt = static_cast<int64_t>(ids.size());
      // Only ids the tokenizer has are drawn (a model may have more embedding rows than tokens).
      opts.allowed_vocab = loaded.tokenizer->vocab_size();
      const auto eos = ignore_eos ? std::nullopt : loaded.tokenizer->special_token_ids().eos;
      if (!stop.empty() || eos) {
        opts.stop = [&](const at::Tensor& tokens) {
          if (eos && tokens[0][-1].item<int64_t>() == *eos) return true;
          if (stop.empty()) return false;
          auto tail = tokens[0].narrow(0, n_prompt, tokens.size(1) - n_prompt).to(torch::kInt);
          std::vector<int32_t> v(tail.data_ptr<int32_t>(), tail.data_ptr<int32_t>() + tail.numel());
          return loaded.tokenizer->decode(v).find(stop) != std::string::npos;
        };
      }
      auto out = loaded.model->generate(prompt_ids, opts);
      if (print_ids) {
        if (lead) {
          const auto all = out.to(torch::kLong).contiguous();
          std::string line;
          for (int64_t i = 0; i < all.numel(); ++i) line += fmt::format("{}{}", i ? " " : "", all[i].item<int64_t>());
          std::fprintf(stdout, "%s\n", line.c_str());
          std::fflush(stdout);
        }
        continue;
      }
      auto tail = out.narrow(0, n_prompt, out.size(0) - n_prompt).to(torch::kInt).contiguous();
      std::vector<int32_t> v(tail.data_ptr<int32_t>(), tail.data_ptr<int32_t>() + tail.numel());
      if (eos && !v.empty() && v.back() == *eos) v.pop_back();  // the text ends where EOS came
      std::string text = loaded.tokenizer->decode(v);
      if (!stop.empty()) {
        if (auto at = text.find(stop); at != std::string::npos) text.resize(at);
      }
      if (lead) {
        const std::string whole = raw ? p + text : fsdpp::data::printable_text(p + text);
        std::fwrite(whole.data(), 1, whole.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const fsdpp::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
