#pragma once
// How fully_shard split each parameter, as plain values: what state dicts read (and what tensor
// and expert parallelism extend) instead of fsdp's internals.
//
//   for (const auto& p : fsdpp::sharded_params(*model)) {  // root and nested units, unit by unit
//     p.fqn;                  // "layers.0.attention.wq.weight"
//     p.global_shape;         // {64, 64}
//     p.local_shard;          // this rank's padded shard: (16, 64) on 4 ranks
//     p.placements[0].rows_of(3);  // rows of the global tensor that rank 3 holds
//   }
//   auto full = fsdpp::sharded_params(*model)[0].gather(opt_state);  // collective
//
// A parameter is split over zero or more mesh dims, its placements, outermost first. Each
// placement cuts one tensor dim of what the placements before it left into `world` chunks of
// `chunk` = ceil(size / world) along that dim; rank k's chunk is [k * chunk, k * chunk +
// rows_of(k)), padded at its end to `chunk` (a rank may hold no rows at all). fully_shard makes
// one placement: dim 0 over the unit's shard group (none when that group has one rank, as under
// NO_SHARD); a 0-dim parameter counts as one row. Tensor and expert parallelism add placements
// along other mesh dims and tensor dims; code that reads a layout it does not know (a checkpoint
// format written in dim-0 rows, say) checks `placements` and refuses the rest by name.
//
// Ranks that hold the same shard (the "replicate" dim of HYBRID_SHARD, every rank under
// NO_SHARD) are `replicate_group`; they hold equal values.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp {

struct ShardPlacement {
  std::string mesh_dim;                       // the mesh dim's name: "shard", "dp", ...
  std::shared_ptr<dist::ProcessGroup> group;  // the ranks along it (never null)
  int dim = 0;            // the tensor dim it cuts
  int64_t size = 1;       // that dim's size before the cut
  int world = 1;          // ranks along the mesh dim (> 1)
  int rank = 0;           // this rank's place among them
  int64_t chunk = 1;      // ceil(size / world): each rank's chunk, padding included

  int64_t begin_of(int k) const { return k * chunk; }
  // The rows (entries along `dim`) rank k holds; the rest of its chunk is padding.
  int64_t rows_of(int k) const;
};

struct ShardedParam {
  std::string fqn;                    // from the root: "layers.0.attention.wq.weight"
  std::string unit;                   // the unit's name: "(root)", "layers.0"
  std::vector<int64_t> global_shape;  // the whole parameter's shape
  std::vector<ShardPlacement> placements;  // outermost first; empty: this rank holds it whole
  std::shared_ptr<dist::ProcessGroup> replicate_group;  // null: no replicas
  at::Tensor param;        // the registered parameter (what optimizers key their state by)
  at::Tensor local_shard;  // this rank's padded shard: the parameter's data between steps
  at::Device device = at::kCPU;  // where the unit's collectives run
  // The parameter points at local_shard (false inside forward and backward, where it is the
  // gathered tensor).
  bool at_rest = true;

  // A tensor laid out like local_shard (the shard itself, or optimizer state of the same shape)
  // gathered to global_shape, on local_shard's device. Collective over the placements' groups.
  at::Tensor gather(const at::Tensor& local) const;
};

// Every parameter of a fully_shard-ed module: the root unit's and every unit's inside it, unit
// by unit in the order of their modules, each unit's parameters in registration order. `root`
// must be the module given last to fully_shard; `what` names the caller in that error.
std::vector<ShardedParam> sharded_params(torch::nn::Module& root,
                                         const char* what = "sharded_params");

// gather() for many parameters at once: locals[i] (laid out like params[i]->local_shard, or
// undefined: an undefined result, zeros sent) gathered with one flat all-gather per group of
// parameters that share placements, dtype and device (one per unit for fully_shard), in
// the order they first appear. Collective: every rank of those groups passes the same
// parameters in the same order.
std::vector<at::Tensor> gather_full(const std::vector<const ShardedParam*>& params,
                                    const std::vector<at::Tensor>& locals);

}  // namespace fsdpp
