// fsdpp-ckpt: look into and convert fsdpp checkpoints without starting a job.
//   fsdpp-ckpt inspect [--no-verify] DIR
//   fsdpp-ckpt consolidate [--force] DIR OUT.safetensors   (every parameter and buffer at full size)
//   fsdpp-ckpt reshard [--force] --world-size N DIR OUT     (SHARDED layout for N ranks)
//   fsdpp-ckpt export-hf [--force] [--model-config FILE] DIR OUT   (Hugging Face Llama directory)
//   fsdpp-ckpt import-hf [--force] HF_DIR OUT                (fsdpp FULL checkpoint)
// Every subcommand that writes refuses an OUT that exists unless --force, and refuses an OUT
// inside its input (or holding it) even with --force: state::check_output_path.
#include <filesystem>
#include <cstdio>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/state/consolidate.h"
#include "fsdpp/state/output_path.h"

namespace {
int usage() {
  std::fprintf(stderr,
               "usage: fsdpp-ckpt inspect [--no-verify] DIR\n"
               "       fsdpp-ckpt consolidate [--force] DIR OUT.safetensors\n"
               "       fsdpp-ckpt reshard [--force] --world-size N DIR OUT\n"
               "       fsdpp-ckpt export-hf [--force] [--model-config model_config.json] DIR OUT_DIR\n"
               "       fsdpp-ckpt import-hf [--force] HF_DIR OUT\n"
               "DIR is a checkpoint saved by fsdpp (fsdpp::state::save_state_dict or fsdpp-train's\n"
               "checkpoint-<step>). inspect verifies every checksum unless --no-verify;\n"
               "consolidate writes one safetensors file that Python's safetensors and Hugging Face\n"
               "tools read; reshard rewrites a SHARDED (or FULL) checkpoint for N ranks; export-hf\n"
               "and import-hf convert a Llama to and from transformers' save_pretrained layout.\n"
               "An OUT that exists is refused unless --force (then it is replaced atomically);\n"
               "an OUT inside the input, or holding it, is always refused.\n");
  return 2;
}

// "--flag VALUE" anywhere in args: removed from args, its value returned.
bool take_option(std::vector<std::string>& args, const std::string& flag, std::string& value) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag) {
      if (i + 1 >= args.size()) throw fsdpp::ConfigError("[fsdpp-ckpt] " + flag + " needs a value");
      value = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      return true;
    }
    if (args[i].rfind(flag + "=", 0) == 0) {
      value = args[i].substr(flag.size() + 1);
      args.erase(args.begin() + static_cast<long>(i));
      return true;
    }
  }
  return false;
}

bool take_flag(std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag) {
      args.erase(args.begin() + static_cast<long>(i));
      return true;
    }
  }
  return false;
}

int64_t parse_world_size(const std::string& s) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string accepted = fmt::format("expected 1 <= N <= {}", fsdpp::state::kMaxReshardWorldSize);
  if (used != s.size() || s.empty()) {
    // std::stoll also fails on numbers beyond 64 bits: say which it was.
    const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    throw fsdpp::ConfigError("[fsdpp-ckpt] --world-size '" + s + "' is " +
                             (digits ? "too large" : "not a whole number") + "; " + accepted);
  }
  if (v < 1 || v > fsdpp::state::kMaxReshardWorldSize) {
    throw fsdpp::ConfigError("[fsdpp-ckpt] --world-size " + s + ": " + accepted);
  }
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "inspect") {
      const bool verify = !take_flag(args, "--no-verify");
      if (args.size() != 1) return usage();
      std::fputs(fsdpp::state::describe_checkpoint(args[0], verify).c_str(), stdout);
      return 0;
    }
    using fsdpp::state::OutputKind;
    const bool force = cmd != "inspect" && take_flag(args, "--force");
    if (cmd == "consolidate" && args.size() == 2) {
      const auto n = fsdpp::state::consolidate_checkpoint(args[0], args[1], force);
      std::printf("wrote %lld tensors to %s\n", static_cast<long long>(n), args[1].c_str());
      return 0;
    }
    if (cmd == "reshard") {
      std::string ws;
      if (!take_option(args, "--world-size", ws) || args.size() != 2) return usage();
      const int64_t n = parse_world_size(ws);
      const auto r = fsdpp::state::reshard_checkpoint(args[0], args[1], n, force);
      std::printf("resharded %lld tensors into %lld shard files for %lld ranks: %s\n",
                  static_cast<long long>(r.tensors), static_cast<long long>(r.files),
                  static_cast<long long>(n), args[1].c_str());
      return 0;
    }
    if (cmd == "export-hf") {
      std::string model_config;
      take_option(args, "--model-config", model_config);
      if (args.size() != 2) return usage();
      fsdpp::state::check_output_path("export-hf", args[1], {args[0], model_config},
                                      OutputKind::kDirectory, force);
      fsdpp::models::export_hf_checkpoint(args[0], args[1], model_config);
      const bool tokenizer = std::filesystem::exists(std::filesystem::path(args[1]) / "tokenizer_config.json");
      std::printf("wrote a Hugging Face Llama (config.json, model.safetensors%s) to %s\n",
                  tokenizer ? ", the tokenizer" : "; the checkpoint holds no tokenizer", args[1].c_str());
      return 0;
    }
    if (cmd == "import-hf" && args.size() == 2) {
      fsdpp::state::check_output_path("import-hf", args[1], {args[0]}, OutputKind::kDirectory, force);
      fsdpp::models::import_hf_checkpoint(args[0], args[1]);
      std::printf("wrote an fsdpp FULL checkpoint (model.safetensors, index.json, "
                  "model_config.json) to %s\n", args[1].c_str());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return usage();
}
