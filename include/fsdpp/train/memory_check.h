#pragma once
// What a training config will need per rank, from fsdpp-estimate's model of the step, and the
// check the trainer makes with it before it allocates the model: a run that cannot fit stops with
// a sentence naming the sizes, instead of dying later in an allocation (SIGABRT from c10) or at
// the kernel's hand (SIGKILL by the OOM killer).

#include <cstdint>
#include <string>
#include <vector>

#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {

struct ConfiguredEstimate {
  ModelDescription model;
  EstimateOptions options;
  std::vector<std::string> notes;  // where the config says more than the estimate models
  // Non-empty: why the estimate cannot describe this run (a combination it does not model); the
  // trainer then says so and skips its memory check instead of refusing the run.
  std::string skip;
};

// The vocabulary of the tokenizer fsdpp-train will use for `cfg`, before any data is read: 256
// for byte, data.tokenizer_vocab_size for a SentencePiece model still to be trained, else the
// size of the file data.tokenizer or data.tokenizer_model names (read here). A note in `notes`
// says where a vocabulary that is not a file's came from.
int64_t configured_vocab(const TrainConfig& cfg, std::vector<std::string>& notes);

// The estimate's inputs as fsdpp-train will run `cfg` with a vocabulary of `vocab` tokens on
// `dims`, the degrees train::parallel_dims resolved for the run (its memory check).
ConfiguredEstimate configured_estimate(const TrainConfig& cfg, int64_t vocab,
                                       const parallel::ParallelDims& dims);
// ... with the keys' degrees on one rank, before fsdpp-estimate's flags name the world
// (TrainConfig::estimate_options()).
ConfiguredEstimate configured_estimate(const TrainConfig& cfg, int64_t vocab);

// A distillation teacher's description for the estimate: `path` is a model directory (an fsdpp
// checkpoint or a Hugging Face model directory, as distillation.teacher names one; its shape from
// model_config.json / config.json) or an fsdpp-train YAML config, whose model: section is taken
// (with `vocab` tokens when its model.vocab_size is 0). ConfigError naming the path otherwise.
ModelDescription describe_teacher(const std::string& path, int64_t vocab);

// What this process may still allocate: the least of the node's available memory shared by its
// local ranks, its cgroup's headroom likewise, and its own address-space and data limits
// (RLIMIT_AS, RLIMIT_DATA) less what it uses of them.
struct MemoryHeadroom {
  int64_t bytes = 0;
  std::string limited_by;  // "MemAvailable 3.2 GiB over 2 local ranks", ...
};
MemoryHeadroom memory_headroom(int local_world_size);

// Throws ConfigError when the step's peak (`estimate`), or the model built whole in fp32 before
// fully_shard shards it (`whole_model_bytes`, on top of the runtime; 0 under model.deferred_init,
// where no rank holds the whole model), exceeds what this process can still get, naming the
// sizes, the limit, and what to change. training.skip_memory_check skips the call.
void check_memory_fits(const MemoryEstimate& estimate, int64_t whole_model_bytes,
                       int local_world_size);

// On a GPU: throws ConfigError when the step's live tensors (`estimate.tensors`, the estimate
// made with device_is_gpu) exceed the device's free memory (`free_bytes`, cudaMemGetInfo's,
// after this process's CUDA context), naming the sizes, the device and what to change. The
// host's memory is not what limits a GPU run; the caching allocator's slack is not counted.
void check_device_memory_fits(const MemoryEstimate& estimate, int64_t free_bytes,
                              int64_t total_bytes, const std::string& device);

}  // namespace fsdpp::train
