#include "fsdpp/dist/device_mesh.h"

#include <numeric>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/world.h"

namespace fsdpp::dist {

DeviceMesh::DeviceMesh(World& world, std::vector<int> shape, std::vector<std::string> dim_names)
    : shape_(std::move(shape)), dim_names_(std::move(dim_names)), rank_(world.rank()) {
  FSDPP_CHECK_AS(ConfigError, ndim() == 1 || ndim() == 2,
                 "[dist] a DeviceMesh has 1 or 2 dims; got {}", ndim());
  FSDPP_CHECK_AS(ConfigError, dim_names_.size() == shape_.size(),
                 "[dist] DeviceMesh shape has {} dims but {} names were given", shape_.size(),
                 dim_names_.size());
  for (int s : shape_) {
    FSDPP_CHECK_AS(ConfigError, s >= 1, "[dist] DeviceMesh dims must be >= 1; got {}",
                   fmt::join(shape_, "x"));
  }
  FSDPP_CHECK_AS(ConfigError, size() == world.size(),
                 "[dist] a DeviceMesh of shape {} covers {} ranks but the world has {}",
                 fmt::join(shape_, "x"), size(), world.size());
  if (ndim() == 2) {
    FSDPP_CHECK_AS(ConfigError, dim_names_[0] != dim_names_[1],
                   "[dist] DeviceMesh dim names must differ; got '{}' twice", dim_names_[0]);
  }
  coordinate_.resize(ndim());
  int rest = rank_;
  for (int d = ndim() - 1; d >= 0; --d) {
    coordinate_[d] = rest % shape_[d];
    rest /= shape_[d];
  }
  // A 1-D mesh over the world is the world's own group; other groups are made here. Every rank
  // walks every group in the same order so that mesh ids stay in step; it joins only its own.
  const int id = world.next_mesh_id();
  groups_.resize(ndim());
  if (ndim() == 1) {
    groups_[0] = world.group();
    return;
  }
  for (int d = 0; d < 2; ++d) {
    const int other = 1 - d;
    for (int fixed = 0; fixed < shape_[other]; ++fixed) {
      std::vector<int> members;
      for (int i = 0; i < shape_[d]; ++i) {
        members.push_back(d == 0 ? i * shape_[1] + fixed : fixed * shape_[1] + i);
      }
      if (fixed == coordinate_[other]) {
        groups_[d] = world.new_group(
            members, fmt::format("mesh{}/{}/{}", id, dim_names_[d], fixed));
      }
    }
  }
}

int DeviceMesh::size() const {
  return std::accumulate(shape_.begin(), shape_.end(), 1, std::multiplies<int>());
}

int DeviceMesh::dim_index(const std::string& name) const {
  for (int d = 0; d < ndim(); ++d) {
    if (dim_names_[d] == name) return d;
  }
  FSDPP_THROW(ConfigError, "[dist] DeviceMesh has no dim '{}'; its dims are {}", name,
              fmt::join(dim_names_, ", "));
}

std::vector<int> DeviceMesh::group_ranks(int dim) const { return groups_.at(dim)->global_ranks(); }

}  // namespace fsdpp::dist
