#pragma once
// The degrees of every parallelism and the one N-D mesh they make (torchtitan's ParallelDims and
// its meshes, fsdpp's room for composition: docs/parallelize.md).
//
//   parallel::ParallelDims dims{.pp = 2, .tp = 2};          // dp_shard -1: the ranks left
//   dims = dims.resolved(world->size());                    // 8 ranks: dp_shard = 2
//   parallel::ParallelMesh mesh(*world, dims);              // collective over the world
//   mesh.group("tp"); mesh.group("dp");                     // dp = dp_replicate x dp_shard
//
// The dense mesh is (pp, dp_replicate, dp_shard, tp), row-major, so tp is the innermost (ranks
// next to each other: one node's fast links) and pp the outermost, as torchtitan and Megatron
// lay them out. Models with experts that live on other ranks than the dense weights also get
// the sparse mesh over the same ranks, (pp, dp_replicate, efsdp, ep) with efsdp = dp_shard * tp
// / ep: the experts are split over ep (which takes its ranks from dp_shard x tp, tp first) and
// sharded by FSDP over efsdp. Every dim is present (a dim of one rank has a group of one).

#include <memory>
#include <string>

#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/dist/world.h"

namespace fsdpp::parallel {

using GroupPtr = std::shared_ptr<dist::ProcessGroup>;

struct ParallelDims {
  int pp = 1;            // pipeline stages (of one rank each; a schedule may put several per rank)
  int dp_replicate = 1;  // replicas of the shard groups (HSDP's replicate dim)
  int dp_shard = -1;     // FSDP's shard dim; -1: the ranks the other degrees leave
  int tp = 1;            // tensor parallelism (with sequence parallelism or not)
  int ep = 1;            // expert parallelism, carved out of dp_shard x tp

  // dp_shard filled in for `world_size` ranks and every degree checked: each >= 1, their product
  // the world size, ep dividing dp_shard x tp. ConfigError naming the degrees and what fits.
  ParallelDims resolved(int world_size) const;

  int world_size() const { return pp * dp_replicate * dp_shard * tp; }
  int dp() const { return dp_replicate * dp_shard; }  // ranks that take different batches
  int efsdp() const { return dp_shard * tp / ep; }     // the experts' FSDP dim
  // This rank's place among the dp() ranks (which rows of the global batch it takes): the
  // dense mesh is (pp, dp_replicate, dp_shard, tp), so the ranks of a tp group and of a pp
  // group share it.
  int dp_rank(int rank) const { return (rank / tp) % dp(); }
  bool pipeline_parallel() const { return pp > 1; }
  bool tensor_parallel() const { return tp > 1; }
  bool expert_parallel() const { return ep > 1; }
  // "pp 2 x dp_shard 2 x tp 2", the dims of more than one rank.
  std::string describe() const;
};

class ParallelMesh {
 public:
  // The dense mesh and the flattened "dp" group. Collective over the world.
  ParallelMesh(dist::World& world, const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }
  // ("pp", "dp_replicate", "dp_shard", "tp").
  const std::shared_ptr<dist::DeviceMesh>& dense() const { return dense_; }
  // ("pp", "dp_replicate", "efsdp", "ep"); null until build_sparse().
  const std::shared_ptr<dist::DeviceMesh>& sparse() const { return sparse_; }
  // Makes the sparse mesh (once). Collective over the world: every rank calls it, or none.
  void build_sparse();

  // A dim of either mesh, or "dp" (dp_replicate x dp_shard). ConfigError for another name.
  const GroupPtr& group(const std::string& dim) const;
  // The name of the mesh dim whose group is `g` (this rank's), or "" when none is.
  std::string dim_of(const GroupPtr& g) const;
  // The dense mesh's dims' groups: together they reach every rank (what a decision every rank
  // must share, such as a gradient scaler's skip, is agreed over).
  std::vector<GroupPtr> dense_groups() const;

 private:
  dist::World* world_;
  ParallelDims dims_;
  std::shared_ptr<dist::DeviceMesh> dense_, sparse_;
};

}  // namespace fsdpp::parallel
