#pragma once
// An N-D arrangement of the world's ranks with named dimensions, e.g. {"replicate", "shard"} for
// HYBRID_SHARD or {"pp", "dp_replicate", "dp_shard", "tp"} for N-D parallelism. Ranks are laid
// out row-major: on a (A, B, C) mesh, rank r sits at (r / (B*C), (r / C) % B, r % C). The group
// along a dim holds the ranks that differ from this one only along that dim; the mesh creates
// and owns the groups this rank is in.
//
//   auto mesh = world->init_device_mesh({2, 2, 2}, {"dp_replicate", "dp_shard", "tp"});
//   mesh->group("tp");                                  // 2 ranks: this rank's row
//   auto dp = mesh->flatten({"dp_replicate", "dp_shard"}, "dp");   // 4 ranks; also group("dp")
//   auto inner = mesh->sub({"dp_shard", "tp"});         // a 2x2 view holding this rank
//
// Sub-meshes and flattened dims name dims in the mesh's own order ({"dp_shard", "tp"}, not
// {"tp", "dp_shard"}), as PyTorch's DeviceMesh does: a group's rank order is then always the
// row-major order of the mesh, whoever asks for it. A dim of size 1 gets a group of one rank
// (its collectives are local copies; no bytes move).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist {

class World;

class DeviceMesh {
 public:
  // Collective over the whole world: every rank calls it with the same arguments, in the same
  // order as other meshes are made. Any number of dims >= 1; their product must be the world
  // size, and names must be distinct and non-empty.
  DeviceMesh(World& world, std::vector<int> shape, std::vector<std::string> dim_names);

  int ndim() const { return static_cast<int>(dims_.size()); }
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  int size() const;           // number of ranks in the mesh
  int size(int dim) const { return shape_.at(dim); }
  int size(const std::string& dim) const { return shape_.at(dim_index(dim)); }
  int dim_index(const std::string& name) const;  // throws naming the known dims
  // This rank's coordinate along every dim.
  const std::vector<int>& coordinate() const { return coordinate_; }
  // The global ranks of this mesh, row-major (a sub-mesh: the slice that holds this rank).
  std::vector<int> ranks() const;

  // The group of ranks that differ from this one only along `dim`.
  const std::shared_ptr<ProcessGroup>& group(int dim) const { return groups_.at(dim); }
  // A dim's group, or a group made by flatten() under that name.
  const std::shared_ptr<ProcessGroup>& group(const std::string& name) const;
  // The global ranks of that group, in group-rank order (computed, so tests can check layouts).
  std::vector<int> group_ranks(int dim) const;
  std::vector<int> group_ranks(const std::string& name) const;
  // What this rank sent over the group along `dim`: on a ("replicate", "shard") mesh,
  // counters("shard") is the traffic inside a shard group (a node, under HYBRID_SHARD) and
  // counters("replicate") the traffic across them. Subtract two readings for one step.
  CommCounters counters(const std::string& dim) const { return group(dim)->counters(); }

  // The mesh over `dims` (named in this mesh's order) that holds this rank: the ranks that share
  // this rank's coordinates along every other dim. A view: it communicates nothing, and its
  // groups are this mesh's own.
  std::shared_ptr<DeviceMesh> sub(const std::vector<std::string>& dims) const;

  // One group over `dims` together (named in this mesh's order): the ranks that differ from this
  // one only along them, in row-major order, e.g. dp_replicate x dp_shard for data loading and
  // the loss. Collective over the whole world: every rank calls it with the same arguments (on
  // its own sub-mesh, if on one), in the same order. Afterwards group(name) returns it, on this
  // mesh and on every mesh of the same root whose dims include `dims`. Flattening the same dims
  // again returns the same group; one dim is that dim's own group.
  std::shared_ptr<ProcessGroup> flatten(const std::vector<std::string>& dims,
                                        const std::string& name);

 private:
  // What a mesh and all its sub-meshes share: the root's layout and every group made for it.
  struct Root {
    World* world = nullptr;
    int id = 0;
    std::vector<int> shape;
    std::vector<std::string> names;
    std::vector<int> coordinate;
    std::map<std::vector<int>, std::shared_ptr<ProcessGroup>> groups;  // by root dims
    std::map<std::string, std::vector<int>> flat_names;                // name -> root dims
  };
  DeviceMesh(std::shared_ptr<Root> root, std::vector<int> dims);
  // Root dim indices of `names`, checked: known, distinct, in this mesh's order.
  std::vector<int> root_dims(const std::vector<std::string>& names, const char* what) const;
  // The group over root dims `dims` holding this rank; made (collectively) on first use.
  const std::shared_ptr<ProcessGroup>& group_over(const std::vector<int>& dims);
  std::vector<int> members_over(const std::vector<int>& dims) const;

  std::shared_ptr<Root> root_;
  std::vector<int> dims_;  // this mesh's dims as root dim indices, ascending
  std::vector<int> shape_;
  std::vector<std::string> dim_names_;
  std::vector<int> coordinate_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace fsdpp::dist
