#pragma once
// A 1-D or 2-D arrangement of the world's ranks with named dimensions, e.g. {"replicate",
// "shard"} for HYBRID_SHARD. Ranks are laid out row-major: on a (R, S) mesh, rank r sits at
// (r / S, r % S); the group along "shard" holds the S ranks of its row, the group along
// "replicate" the R ranks of its column. The mesh creates and owns the sub-groups this rank is in.

#include <memory>
#include <string>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist {

class World;

class DeviceMesh {
 public:
  // Collective over the whole world: every rank calls it with the same arguments, in the same
  // order as other meshes are made.
  DeviceMesh(World& world, std::vector<int> shape, std::vector<std::string> dim_names);

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  int size() const;           // number of ranks in the mesh
  int size(int dim) const { return shape_.at(dim); }
  int dim_index(const std::string& name) const;  // throws naming the known dims
  // This rank's coordinate along every dim.
  const std::vector<int>& coordinate() const { return coordinate_; }

  // The group of ranks that differ from this one only along `dim`.
  const std::shared_ptr<ProcessGroup>& group(int dim) const { return groups_.at(dim); }
  const std::shared_ptr<ProcessGroup>& group(const std::string& dim) const {
    return groups_.at(dim_index(dim));
  }
  // The global ranks of that group, in group-rank order (computed, so tests can check layouts).
  std::vector<int> group_ranks(int dim) const;
  // What this rank sent over the group along `dim`: on a ("replicate", "shard") mesh,
  // counters("shard") is the traffic inside a shard group (a node, under HYBRID_SHARD) and
  // counters("replicate") the traffic across them. Subtract two readings for one step.
  CommCounters counters(const std::string& dim) const { return group(dim)->counters(); }

 private:
  std::vector<int> shape_;
  std::vector<std::string> dim_names_;
  std::vector<int> coordinate_;
  int rank_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace fsdpp::dist
