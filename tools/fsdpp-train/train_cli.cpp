#include "train_cli.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/common/exit_code.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/train/config.h"
#include "fsdpp/observe/run_plot.h"
#include "fsdpp/train/teacher_logits.h"
#include "fsdpp/train/trainer.h"

namespace fsdpp::tools {
namespace {

// fsdpp-train teacher-logits CONFIG OUT [flags] [overrides]: the offline teacher cache.
int run_teacher_logits(int argc, char** argv) {
  return exit_code_of([&] {
    std::vector<std::string> args(argv + 2, argv + argc);
    distill::TeacherCacheOptions o;
    std::vector<std::string> positional, overrides;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      const auto value = [&]() -> std::string {
        FSDPP_CHECK_AS(ConfigError, i + 1 < args.size(), "[teacher-logits] {} needs a value", a);
        return args[++i];
      };
      const auto count = [&](const std::string& v) {
        size_t used = 0;
        long long n = -1;
        try {
          n = std::stoll(v, &used);
        } catch (const std::exception&) {
        }
        FSDPP_CHECK_AS(ConfigError, used == v.size() && n >= 1,
                       "[teacher-logits] {} '{}': expected a whole number >= 1", a, v);
        return static_cast<int64_t>(n);
      };
      if (a == "--top-k") {
        o.top_k = count(value());
      } else if (a == "--dtype") {
        o.dtype = value();
      } else if (a == "--windows-per-shard") {
        o.windows_per_shard = count(value());
      } else if (a == "--force") {
        o.force = true;
      } else if (a.rfind("--", 0) == 0) {
        FSDPP_THROW(ConfigError, "[teacher-logits] unknown flag {}; expected --top-k, --dtype, "
                                 "--windows-per-shard or --force", a);
      } else if (a.find('=') != std::string::npos) {
        overrides.push_back(a);
      } else {
        positional.push_back(a);
      }
    }
    FSDPP_CHECK_AS(ConfigError, positional.size() == 2,
                   "[teacher-logits] expected CONFIG.yaml and OUT_DIR; got {} other argument(s)",
                   positional.size());
    o.out = positional[1];
    auto config = train::TrainConfig::from_file(positional[0], overrides);
    auto world = dist::init_from_env();
    const auto sum = train::write_teacher_cache(std::move(config), world, o);
    if (world->rank() == 0) {
      std::printf("[teacher-logits] wrote %s: %lld windows of %lld tokens, top %lld (%s), %zu "
                  "shard(s), %.1f MiB, in %.1f s\n",
                  o.out.c_str(), static_cast<long long>(sum.info.windows),
                  static_cast<long long>(sum.info.seq_len), static_cast<long long>(sum.info.top_k),
                  sum.info.dtype.c_str(), sum.info.shards.size(),
                  static_cast<double>(sum.bytes) / (1 << 20), sum.seconds);
    }
    return 0;
  });
}

}  // namespace

int run_fsdpp_train(int argc, char** argv, const std::function<train::TrainerHooks()>& make_hooks) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(stderr,
                 "usage: fsdpp-train CONFIG.yaml [key.path=value ...]\n"
                 "  trains the model of CONFIG (see docs/config.md); start it with fsdpp-run, e.g.\n"
                 "  fsdpp-run --nproc-per-node 2 fsdpp-train configs/default.yaml "
                 "training.max_steps=100\n"
                 "usage: fsdpp-train plot OUTPUT_DIR [OUT.svg]\n"
                 "  draws the loss, validation loss and memory per rank of a run from its "
                 "metrics.jsonl (default OUT: OUTPUT_DIR/run.svg)\n"
                 "usage: fsdpp-train teacher-logits CONFIG.yaml OUT_DIR [--top-k K] [--dtype "
                 "bfloat16|float32]\n"
                 "                  [--windows-per-shard N] [--force] [key.path=value ...]\n"
                 "  runs CONFIG's distillation.teacher once over its training windows and writes "
                 "their top-K\n"
                 "  log-probabilities to OUT_DIR, for distillation.teacher_cache=OUT_DIR "
                 "(docs/distillation.md)\n");
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "teacher-logits") return run_teacher_logits(argc, argv);
  if (std::string(argv[1]) == "plot") {
    if (argc < 3 || argc > 4) {
      std::fprintf(stderr, "usage: fsdpp-train plot OUTPUT_DIR [OUT.svg]\n");
      return 2;
    }
    try {
      const std::filesystem::path dir = argv[2];
      const std::filesystem::path out = argc == 4 ? std::filesystem::path(argv[3]) : dir / "run.svg";
      const auto sum = observe::write_run_plot(dir, out);
      std::printf("[plot] wrote %s: %lld steps logged, %lld with a validation loss, memory of %d "
                  "ranks\n",
                  out.string().c_str(), static_cast<long long>(sum.points),
                  static_cast<long long>(sum.val_points), sum.ranks);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  return exit_code_of([&] {
    std::vector<std::string> overrides(argv + 2, argv + argc);
    auto config = train::TrainConfig::from_file(argv[1], overrides);
    // training.use_cpu / no_cuda: this process computes on the CPU whatever GPUs it sees.
    if (config.training.on_cpu()) setenv("FSDPP_DEVICE", "cpu", 1);
    auto world = dist::init_from_env();
    train::Trainer trainer(std::move(config), world, make_hooks ? make_hooks() : train::TrainerHooks{});
    const auto result = trainer.run();
    return result.stopped_by_signal != 0 ? 128 + result.stopped_by_signal : 0;
  });
}

}  // namespace fsdpp::tools
