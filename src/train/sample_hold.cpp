// SampleHold: the closing sample's model gathered once when it fits. See sample_hold.h.
#include "sample_hold.h"

#include <fmt/format.h>


#include <torch/torch.h>

#include "fsdpp/dist/device.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/train/memory_check.h"
#include "session.h"

namespace fsdpp::train::detail {

namespace {

// What this rank may still allocate where the model computes: the device's free memory and the
// caching allocator's slack on a GPU, the node's share (memory_check.h) on the CPU.
int64_t headroom_bytes(const TrainSession& s) {
  const c10::Device device = s.world.device();
  if (dist::has_device_memory(device)) {
    const auto m = dist::device_memory(device);
    return m.free + (m.reserved - m.allocated);
  }
  return memory_headroom(s.world.env().local_world_size).bytes;
}

// The whole model's parameters gathered, in the dtype its units gather them in.
int64_t gathered_bytes(torch::nn::Module& root, const FullyShardOptions& fopts) {
  int64_t numel = 0;
  for (const auto& u : inspect_units(root)) numel += u.numel;
  const auto dtype = fopts.mp_policy.param_dtype.value_or(torch::kFloat32);
  return numel * static_cast<int64_t>(c10::elementSize(dtype));
}

}  // namespace

SampleHold::SampleHold(TrainSession& s) : s_(s) {
  if (s.pipelined() || !s.lm || s.fopts.offload_policy.offload_params) {
    how_ = s.pipelined() ? "the pipeline's stages, each gathered per token" : "offloaded parameters, gathered per token";
    return;
  }
  const auto& traits = traits_of(s.fopts.strategy);
  if (!traits.shards || traits.keep_unsharded_between_steps) {
    how_ = "the model is whole on every rank";
    return;
  }
  torch::nn::Module& root = s.lm->module();
  const int64_t need = gathered_bytes(root, s.fopts);
  const int64_t room = headroom_bytes(s);
  // The largest shortfall over the ranks: every rank holds, or none does (unshard is collective).
  auto shortfall = torch::tensor({static_cast<double>(need) - static_cast<double>(room) / 2}, torch::kDouble);
  s.world.group()->all_reduce(shortfall, dist::ReduceOp::MAX, {"sample hold"});
  if (shortfall.item<double>() > 0) {
    how_ = fmt::format("gathered per token: the whole model ({:.1f} MiB) does not fit twice in "
                       "every rank's headroom",
                       static_cast<double>(need) / (1 << 20));
    return;
  }
  unshard(root);
  held_ = true;
  how_ = fmt::format("the model gathered once, {:.1f} MiB per rank",
                     static_cast<double>(need) / (1 << 20));
}

SampleHold::~SampleHold() {
  if (held_) reshard(s_.lm->module());
}

}  // namespace fsdpp::train::detail
