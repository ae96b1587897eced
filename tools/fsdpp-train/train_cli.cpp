#include "train_cli.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/run_plot.h"
#include "fsdpp/train/trainer.h"

namespace fsdpp::tools {

int run_fsdpp_train(int argc, char** argv, const std::function<train::TrainerHooks()>& make_hooks) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(stderr,
                 "usage: fsdpp-train CONFIG.yaml [key.path=value ...]\n"
                 "  trains the model of CONFIG (see docs/config.md); start it with fsdpp-run, e.g.\n"
                 "  fsdpp-run --nproc-per-node 2 fsdpp-train configs/default.yaml "
                 "training.max_steps=100\n"
                 "usage: fsdpp-train plot OUTPUT_DIR [OUT.svg]\n"
                 "  draws the loss, validation loss and memory per rank of a run from its "
                 "metrics.jsonl (default OUT: OUTPUT_DIR/run.svg)\n");
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "plot") {
    if (argc < 3 || argc > 4) {
      std::fprintf(stderr, "usage: fsdpp-train plot OUTPUT_DIR [OUT.svg]\n");
      return 2;
    }
    try {
      const std::filesystem::path dir = argv[2];
      const std::filesystem::path out = argc == 4 ? std::filesystem::path(argv[3]) : dir / "run.svg";
      const auto sum = train::write_run_plot(dir, out);
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
  try {
    std::vector<std::string> overrides(argv + 2, argv + argc);
    auto config = train::TrainConfig::from_file(argv[1], overrides);
    // training.use_cpu / no_cuda: this process computes on the CPU whatever GPUs it sees.
    if (config.training.on_cpu()) setenv("FSDPP_DEVICE", "cpu", 1);
    auto world = dist::init_from_env();
    train::Trainer trainer(std::move(config), world, make_hooks ? make_hooks() : train::TrainerHooks{});
    const auto result = trainer.run();
    return result.stopped_by_signal != 0 ? 128 + result.stopped_by_signal : 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace fsdpp::tools
