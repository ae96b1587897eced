// The degrees of every parallelism and their mesh. See include/fsdpp/parallel/parallel_dims.h.
#include "fsdpp/parallel/parallel_dims.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "fsdpp/common/error.h"

namespace fsdpp::parallel {

ParallelDims ParallelDims::resolved(int world_size) const {
  using Degree = std::pair<const char*, int>;
  for (auto [name, v] : {Degree{"pp", pp}, Degree{"dp_replicate", dp_replicate}, Degree{"tp", tp},
                         Degree{"ep", ep}}) {
    FSDPP_CHECK_AS(ConfigError, v >= 1, "[parallel] ParallelDims.{}={}: expected >= 1", name, v);
  }
  FSDPP_CHECK_AS(ConfigError, dp_shard == -1 || dp_shard >= 1,
                 "[parallel] ParallelDims.dp_shard={}: expected -1 (the ranks the other degrees "
                 "leave) or >= 1",
                 dp_shard);
  ParallelDims d = *this;
  const int others = pp * dp_replicate * tp;
  const std::string degrees =
      fmt::format("pp {} x dp_replicate {} x dp_shard {} x tp {}", pp, dp_replicate,
                  dp_shard == -1 ? std::string("-1") : std::to_string(dp_shard), tp);
  if (dp_shard == -1) {
    FSDPP_CHECK_AS(ConfigError, world_size % others == 0,
                   "[parallel] {} cannot fill {} ranks: pp x dp_replicate x tp = {} must divide "
                   "the world size",
                   degrees, world_size, others);
    d.dp_shard = world_size / others;
  }
  FSDPP_CHECK_AS(ConfigError, d.world_size() == world_size,
                 "[parallel] {} is {} ranks but the world has {}; expected their product to be "
                 "the world size (dp_shard -1 takes the ranks left over)",
                 degrees, d.world_size(), world_size);
  FSDPP_CHECK_AS(ConfigError, (d.dp_shard * d.tp) % ep == 0,
                 "[parallel] ParallelDims.ep={} does not divide dp_shard x tp = {} x {}: expert "
                 "parallelism takes its ranks from the data-parallel shards and the tensor-"
                 "parallel ranks (torchtitan's efsdp = dp_shard x tp / ep)",
                 ep, d.dp_shard, d.tp);
  return d;
}

std::string ParallelDims::describe() const {
  std::string s;
  using Degree = std::pair<const char*, int>;
  for (auto [name, v] : {Degree{"pp", pp}, Degree{"dp_replicate", dp_replicate},
                         Degree{"dp_shard", dp_shard}, Degree{"tp", tp}, Degree{"ep", ep}}) {
    if (v > 1) s += fmt::format("{}{} {}", s.empty() ? "" : " x ", name, v);
  }
  return s.empty() ? "one rank" : s;
}

ParallelMesh::ParallelMesh(dist::World& world, const ParallelDims& dims)
    : world_(&world), dims_(dims.resolved(world.size())) {
  dense_ = world.init_device_mesh({dims_.pp, dims_.dp_replicate, dims_.dp_shard, dims_.tp},
                                  {"pp", "dp_replicate", "dp_shard", "tp"});
  dense_->flatten({"dp_replicate", "dp_shard"}, "dp");
}

void ParallelMesh::build_sparse() {
  if (sparse_) return;
  sparse_ = world_->init_device_mesh({dims_.pp, dims_.dp_replicate, dims_.efsdp(), dims_.ep},
                                     {"pp", "dp_replicate", "efsdp", "ep"});
}

const GroupPtr& ParallelMesh::group(const std::string& dim) const {
  if (dim == "efsdp" || dim == "ep") {
    FSDPP_CHECK(sparse_ != nullptr, "[parallel] the mesh has no '{}' dim before build_sparse()", dim);
    return sparse_->group(dim);
  }
  return dense_->group(dim);
}

std::string ParallelMesh::dim_of(const GroupPtr& g) const {
  for (const auto* m : {&dense_, &sparse_}) {
    if (!*m) continue;
    for (const auto& name : (*m)->dim_names()) {
      if ((*m)->group(name) == g) return name;
    }
  }
  return dense_->group("dp") == g ? "dp" : "";
}

std::vector<GroupPtr> ParallelMesh::dense_groups() const {
  std::vector<GroupPtr> out;
  for (int d = 0; d < dense_->ndim(); ++d) out.push_back(dense_->group(d));
  return out;
}

}  // namespace fsdpp::parallel
