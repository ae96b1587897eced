// shard_model (phases.h): the process's allocator setting for FSDP's buffers, the device mesh,
// fully_shard's options and wrap policy from the config, activation checkpointing and
// fully_shard; and comm_split, the units' bytes per kind of link.
#include <malloc.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "phases.h"

namespace fsdpp::train::detail {

void shard_model(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  auto& init = s.init;
  auto& model = s.model;
  // FSDP frees and re-allocates unit-sized buffers every step (gathered parameters, reduce
  // inputs), and glibc's dynamic mmap threshold then keeps them in its heap: measured, a 2-rank
  // FULL_SHARD run peaked 35% above its working set, above NO_SHARD. A fixed threshold hands
  // large blocks back to the system at once, for page faults on the next allocation.
  // Process-wide, which the trainer's process may decide (docs/fully-shard.md#memory).
  if (t.malloc_mmap_threshold > 0) {
    FSDPP_CHECK(mallopt(M_MMAP_THRESHOLD, static_cast<int>(t.malloc_mmap_threshold)) == 1,
                "[train] glibc refused training.malloc_mmap_threshold={}",
                t.malloc_mmap_threshold);
  }
  const bool hybrid = s.hybrid = traits_of(t.fsdp).hybrid;
  std::shared_ptr<dist::DeviceMesh> mesh = world.mesh();
  if (hybrid) {
    // Shard inside a node (fast links), replicate across nodes: fsdp-run lays ranks out node by
    // node, so the mesh's rows of LOCAL_WORLD_SIZE ranks are the nodes.
    const int shard = cfg.hybrid_shard_group_size(world.env().local_world_size);
    FSDPP_CHECK_AS(ConfigError, shard <= world.size() && world.size() % shard == 0,
                   "[train] training.fsdp={} shards over groups of {} ranks ({}), which must "
                   "divide the world size {}",
                   to_string(t.fsdp), shard,
                   t.fsdp_config.hybrid_shard_group_size > 0
                       ? "training.fsdp_config.fsdp_hybrid_shard_group_size"
                       : "LOCAL_WORLD_SIZE",
                   world.size());
    mesh = world.init_device_mesh({world.size() / shard, shard}, {"replicate", "shard"});
  }
  const FullyShardOptions& fopts = s.fopts = cfg.fully_shard_options(mesh);
  const WrapPolicy policy = cfg.wrap_policy();
  const auto& fc = t.fsdp_config;
  if (t.gradient_checkpointing) {
    const auto marked = apply_activation_checkpointing(
        *model, fc.transformer_layer_cls_to_wrap, static_cast<int>(t.gradient_checkpointing_every));
    s.say(fmt::format("[train] activation checkpointing: {} of {} blocks", marked.size(),
                      cfg.model.n_layers));
  }
  auto units = apply_fully_shard(*model, policy, fopts);
  if (init) {
    init->load_after_sharding(model, world.group());
    s.say(fmt::format("[train] weights from {} (model.init_from); optimizer, schedule and data "
                      "start afresh at step 1",
                      init->dir().string()));
  }
  s.say(fmt::format("[train] fsdp: {} over {}{}, {} ({}), {:.2f} M parameters held per rank",
                    to_string(t.fsdp), count_of(world.size(), "rank"),
                    hybrid ? fmt::format(" ({} replicas x {} shards)", fopts.mesh->size(0),
                                         fopts.mesh->size(1))
                           : "",
                    count_of(static_cast<int64_t>(units.size()), "unit"), fc.auto_wrap_policy,
                    models::num_parameters(*model) / 1e6));
}

// metrics.jsonl's comm_bytes_intra / comm_bytes_inter.
std::pair<uint64_t, uint64_t> comm_split(TrainSession& s) {
  const auto& t = s.cfg.training;
  const bool hybrid = s.hybrid;
  const auto& fopts = s.fopts;
  auto& model = s.model;
  std::pair<uint64_t, uint64_t> intra_inter{0, 0};
  if (hybrid) {
    intra_inter = {fopts.mesh->counters("shard").total_bytes(),
                   fopts.mesh->counters("replicate").total_bytes()};
  } else if (!traits_of(t.fsdp).shards) {
    intra_inter.second = comm_counters(*model).total_bytes();
  } else {
    intra_inter.first = comm_counters(*model).total_bytes();
  }
  return intra_inter;
}

}  // namespace fsdpp::train::detail
