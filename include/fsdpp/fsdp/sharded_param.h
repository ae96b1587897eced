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
// placement cuts one tensor dim of what the placements before it left into `world` pieces along
// that dim. fully_shard's placement is *padded*: chunks of `chunk` = ceil(size / world), rank
// k's [k * chunk, k * chunk + rows_of(k)), padded at its end to `chunk` (a rank may hold no rows
// at all): dim 0 over the unit's shard group (none when that group has one rank, as under
// NO_SHARD); a 0-dim parameter counts as one row. Tensor and expert parallelism cut the
// parameter before fully_shard sees it (FullyShardOptions::outer_layout): their placements
// come first and are *balanced* (tp::shard_range's split: the first size % world ranks hold one
// row more, nobody holds padding), along dim 0 (column-parallel, experts) or another dim
// (row-parallel). gather() and gather_full() undo any such stack; code that reads a layout it
// does not know checks `placements` and refuses the rest by name.
//
// Ranks that hold the same shard (the "replicate" dim of HYBRID_SHARD, every rank under
// NO_SHARD) are `replicate_group`; they hold equal values.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
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
  int64_t chunk = 1;      // ceil(size / world): the most rows a rank holds (padded: every rank's)
  // false: fully_shard's padded chunks; true: tp::shard_range's balanced split, no padding.
  bool balanced = false;

  int64_t begin_of(int k) const;
  // The rows (entries along `dim`) rank k holds; the rest of a padded chunk is padding.
  int64_t rows_of(int k) const;
  // What this rank's tensor holds along `dim`: rows_of(rank) when balanced, else chunk.
  int64_t held() const { return balanced ? rows_of(rank) : chunk; }
};

// A placement along `mesh_dim` of a dim of `size`, balanced as tp::shard_range splits it: what
// tensor and expert parallelism hand to FullyShardOptions::outer_layout.
ShardPlacement balanced_placement(std::string mesh_dim, std::shared_ptr<dist::ProcessGroup> group,
                                  int dim, int64_t size);

// How tensor or expert parallelism left a parameter before fully_shard sees it.
struct OuterLayout {
  std::vector<ShardPlacement> placements;  // outermost first; empty: this rank holds it whole
  // Groups along which this rank's tensor is one of equal copies (a norm's weight on every
  // rank of a tp group): state dicts write it once.
  std::vector<std::shared_ptr<dist::ProcessGroup>> replicas;
};
// Looked up by the registered parameter tensor (FullyShardOptions::outer_layout).
using OuterLayoutOf = std::function<OuterLayout(const at::Tensor& param)>;

struct ShardedParam {
  std::string fqn;                    // from the root: "layers.0.attention.wq.weight"
  std::string unit;                   // the unit's name: "(root)", "layers.0"
  std::vector<int64_t> global_shape;  // the whole parameter's shape
  std::vector<ShardPlacement> placements;  // outermost first; empty: this rank holds it whole
  std::shared_ptr<dist::ProcessGroup> replicate_group;  // null: no replicas
  // Further groups of equal copies from OuterLayout::replicas (tensor parallelism's group for a
  // parameter it leaves whole).
  std::vector<std::shared_ptr<dist::ProcessGroup>> outer_replicas;
  at::Tensor param;        // the registered parameter (what optimizers key their state by)
  at::Tensor local_shard;  // this rank's padded shard: the parameter's data between steps
  at::Device device = at::kCPU;  // where the unit's collectives run
  // The parameter points at local_shard (false inside forward and backward, where it is the
  // gathered tensor).
  bool at_rest = true;

  // A tensor laid out like local_shard (the shard itself, or optimizer state of the same shape)
  // gathered to global_shape, on local_shard's device. Collective over the placements' groups.
  at::Tensor gather(const at::Tensor& local) const;

  // This rank's rows of the whole parameter, as checkpoints store them: the placements along
  // dim 0 nest into one range [row_begin(), row_begin() + own_rows()) of global dim 0; the
  // local tensor holds chunk_rows() rows (padding after own_rows()).
  int64_t row_begin() const;
  int64_t own_rows() const;
  int64_t chunk_rows() const;
  // Whether a placement cuts a dim other than 0 (row-parallel): then the rows' other dims are
  // spread over those placements' groups and rows_view() gathers them.
  bool splits_rows() const;
  // Whether this rank writes its rows when every rank saves its own: the first of its copies
  // (replicate_group, outer_replicas) and the first of every group that splits its rows, so
  // that each row is written once.
  bool writes_rows() const;
  // The whole-width rows of `local` (laid out like local_shard): (chunk_rows(), global dims
  // 1...), gathered over the placements that cut other dims. Collective over their groups;
  // `local` itself when there are none.
  at::Tensor rows_view(const at::Tensor& local) const;
  // The reverse, with no communication: this rank's part of whole-width rows (own_rows() or
  // chunk_rows() of them, global dims 1...), laid out as local_shard's first rows.
  at::Tensor local_of_rows(const at::Tensor& rows) const;
};

// Every parameter of a fully_shard-ed module: the root unit's and every unit's inside it, unit
// by unit in the order of their modules, each unit's parameters in registration order. `root`
// must be the module given last to fully_shard; `what` names the caller in that error.
std::vector<ShardedParam> sharded_params(torch::nn::Module& root,
                                         const char* what = "sharded_params");

// The parameters of any module with their placements: a fully_shard root's sharded_params();
// any other module's own tensors placed as `layout` says (tensor or expert parallelism's outer
// layout; none: every parameter whole), for a model such parallelism split without fully_shard.
// A module that holds units without being one is refused; `what` names the caller then.
std::vector<ShardedParam> placed_params(torch::nn::Module& root, const OuterLayoutOf& layout = {},
                                        const char* what = "placed_params");

// rows_view() for many parameters at once (one all-gather per group of alike parameters, as
// gather_full). Collective like gather_full.
std::vector<at::Tensor> gather_rows(const std::vector<const ShardedParam*>& params,
                                    const std::vector<at::Tensor>& locals);

// gather() for many parameters at once: locals[i] (laid out like params[i]->local_shard, or
// undefined: an undefined result, zeros sent) gathered with one flat all-gather per group of
// parameters that share placements, dtype and device (one per unit for fully_shard), in
// the order they first appear. Collective: every rank of those groups passes the same
// parameters in the same order.
std::vector<at::Tensor> gather_full(const std::vector<const ShardedParam*>& params,
                                    const std::vector<at::Tensor>& locals);

}  // namespace fsdpp
