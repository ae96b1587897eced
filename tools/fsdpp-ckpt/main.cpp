// fsdpp-ckpt: look into and convert fsdpp checkpoints without starting a job.
//   fsdpp-ckpt inspect [--no-verify] DIR
//   fsdpp-ckpt consolidate [--force] DIR OUT.safetensors   (every parameter and buffer at full size)
//   fsdpp-ckpt reshard [--force] --world-size N DIR OUT     (SHARDED layout for N ranks)
//   fsdpp-ckpt export-hf [--force] [--model-config FILE] [--max-shard-size SIZE] DIR OUT
//                                                            (Hugging Face Llama or Qwen3-MoE)
//   fsdpp-ckpt import-hf [--force] HF_DIR OUT                (fsdpp FULL checkpoint)
//   fsdpp-ckpt compress [--force] [--keep-layers 0,2,3 | --num-layers N] [--num-experts K
//       --calibration FILE [--calibration-tokens N] [--calibration-seq-len T]] [--tokenizer S]
//       TEACHER OUT                                          (a student: models/compress.h)
// Every subcommand that writes refuses an OUT that exists unless --force, and refuses an OUT
// inside its input (or holding it) even with --force: state::check_output_path.
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/models/compress.h"
#include "fsdpp/models/hf_checkpoint.h"
#include "fsdpp/state/consolidate.h"
#include "fsdpp/state/output_path.h"

namespace {
int usage() {
  std::fprintf(stderr,
               "usage: fsdpp-ckpt inspect [--no-verify] DIR\n"
               "       fsdpp-ckpt consolidate [--force] DIR OUT.safetensors\n"
               "       fsdpp-ckpt reshard [--force] --world-size N DIR OUT\n"
               "       fsdpp-ckpt export-hf [--force] [--model-config model_config.json]\n"
               "                            [--max-shard-size SIZE] DIR OUT_DIR\n"
               "       fsdpp-ckpt import-hf [--force] HF_DIR OUT\n"
               "       fsdpp-ckpt compress [--force] [--keep-layers 0,2,3 | --num-layers N]\n"
               "                           [--num-experts K --calibration FILE\n"
               "                           [--calibration-tokens N] [--calibration-seq-len T]]\n"
               "                           [--tokenizer byte|PATH] TEACHER OUT\n"
               "DIR is a checkpoint saved by fsdpp (fsdpp::state::save_state_dict or fsdpp-train's\n"
               "checkpoint-<step>). inspect verifies every checksum unless --no-verify;\n"
               "consolidate writes one safetensors file that Python's safetensors and Hugging Face\n"
               "tools read; reshard rewrites a SHARDED (or FULL) checkpoint for N ranks; export-hf\n"
               "and import-hf convert a Llama or a Qwen3-MoE to and from transformers'\n"
               "save_pretrained layout (SIZE: bytes, or with KB/MB/GB or KiB/MiB/GiB: indexed\n"
               "shards of at most that size); compress writes a student keeping some layers and,\n"
               "of a Qwen3-MoE, the K experts most used on the calibration text.\n"
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

// A whole number >= min for `flag`.
int64_t parse_count(const std::string& flag, const std::string& s, int64_t min) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || v < min) {
    throw fsdpp::ConfigError(fmt::format("[fsdpp-ckpt] {} '{}': expected a whole number >= {}", flag, s, min));
  }
  return v;
}

// "0,2,3" -> {0, 2, 3}.
std::vector<int64_t> parse_list(const std::string& flag, const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(parse_count(flag, s.substr(at, comma - at), 0));
    at = comma + 1;
  }
  return out;
}

// "20KB", "5GB", "1MiB", "123" -> bytes (transformers' max_shard_size: KB = 1000, KiB = 1024).
int64_t parse_size(const std::string& s) {
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"KiB", 1LL << 10}, {"MiB", 1LL << 20}, {"GiB", 1LL << 30}, {"KB", 1000},
      {"MB", 1000000},    {"GB", 1000000000}, {"B", 1}};
  auto bad = [&] {
    return fsdpp::ConfigError(fmt::format("[fsdpp-ckpt] --max-shard-size '{}': expected a whole "
                                          "number of bytes >= 1, optionally with a unit (B, KB, "
                                          "MB, GB, KiB, MiB, GiB) such as 5GB",
                                          s));
  };
  for (const auto& [unit, scale] : kUnits) {
    const std::string u(unit);
    if (s.size() > u.size() && s.compare(s.size() - u.size(), u.size(), u) == 0) {
      try {
        return parse_count("--max-shard-size", s.substr(0, s.size() - u.size()), 1) * scale;
      } catch (const fsdpp::ConfigError&) {
        throw bad();  // the whole flag, not the part before the unit ('5X' of '5XB')
      }
    }
  }
  try {
    return parse_count("--max-shard-size", s, 1);
  } catch (const fsdpp::ConfigError&) {
    throw bad();
  }
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
      const auto mc = std::filesystem::path(args[0]) / "model_config.json";
      if (std::filesystem::exists(mc)) {
        std::ifstream in(mc, std::ios::binary);
        const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        try {
          std::fputs(fsdpp::models::describe_model_config(text, mc.string()).c_str(), stdout);
        } catch (const fsdpp::ConfigError& e) {
          std::printf("  model_config.json: %s\n", e.what());  // the tensors are still described
        }
      }
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
      std::string model_config, max_shard;
      take_option(args, "--model-config", model_config);
      fsdpp::models::HfExportOptions eo;
      if (take_option(args, "--max-shard-size", max_shard)) eo.max_shard_bytes = parse_size(max_shard);
      if (args.size() != 2) return usage();
      fsdpp::state::check_output_path("export-hf", args[1], {args[0], model_config},
                                      OutputKind::kDirectory, force);
      const auto r = fsdpp::models::export_hf_checkpoint(args[0], args[1], model_config, eo);
      std::printf("wrote a Hugging Face %s (config.json, %lld tensors in %s%s) to %s\n",
                  r.architecture == fsdpp::models::Architecture::kQwen3Moe ? "Qwen3MoeForCausalLM"
                                                                           : "LlamaForCausalLM",
                  static_cast<long long>(r.tensors),
                  r.files == 1 && eo.max_shard_bytes == 0
                      ? "model.safetensors"
                      : fmt::format("{} shard file(s) with model.safetensors.index.json", r.files).c_str(),
                  r.tokenizer ? ", the tokenizer" : "; the checkpoint holds no tokenizer", args[1].c_str());
      return 0;
    }
    if (cmd == "import-hf" && args.size() == 2) {
      fsdpp::state::check_output_path("import-hf", args[1], {args[0]}, OutputKind::kDirectory, force);
      const auto r = fsdpp::models::import_hf_checkpoint(args[0], args[1]);
      std::printf("wrote an fsdpp FULL checkpoint of a %s (%lld tensors in model.safetensors, "
                  "index.json, model_config.json%s) to %s\n",
                  fsdpp::models::architecture_name(r.architecture), static_cast<long long>(r.tensors),
                  r.tokenizer ? ", the tokenizer" : "", args[1].c_str());
      return 0;
    }
    if (cmd == "compress") {
      fsdpp::models::CompressOptions co;
      std::string v;
      if (take_option(args, "--keep-layers", v)) co.keep_layers = parse_list("--keep-layers", v);
      if (take_option(args, "--num-layers", v)) co.num_layers = parse_count("--num-layers", v, 1);
      if (take_option(args, "--num-experts", v)) co.num_experts = parse_count("--num-experts", v, 1);
      if (take_option(args, "--calibration", v)) co.calibration_file = v;
      if (take_option(args, "--calibration-tokens", v)) {
        co.calibration_tokens = parse_count("--calibration-tokens", v, 1);
      }
      if (take_option(args, "--calibration-seq-len", v)) {
        co.calibration_seq_len = parse_count("--calibration-seq-len", v, 1);
      }
      take_option(args, "--tokenizer", co.tokenizer);
      if (args.size() != 2) return usage();
      std::vector<std::filesystem::path> inputs = {args[0]};
      if (!co.calibration_file.empty()) inputs.push_back(co.calibration_file);
      fsdpp::state::check_output_path("compress", args[1], inputs, OutputKind::kDirectory, force);
      const auto r = fsdpp::models::compress_checkpoint(args[0], args[1], co);
      std::fputs(r.text().c_str(), stdout);
      std::printf("wrote the student, an fsdpp FULL checkpoint (with compress.json), to %s\n",
                  args[1].c_str());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return usage();
}
