#include "fsdpp/dist/device_mesh.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/world.h"

namespace fsdpp::dist {

namespace {

int product(const std::vector<int>& v) {
  return std::accumulate(v.begin(), v.end(), 1, std::multiplies<int>());
}

}  // namespace

DeviceMesh::DeviceMesh(World& world, std::vector<int> shape, std::vector<std::string> dim_names)
    : root_(std::make_shared<Root>()) {
  FSDPP_CHECK_AS(ConfigError, !shape.empty(), "[dist] a DeviceMesh needs at least one dim");
  FSDPP_CHECK_AS(ConfigError, dim_names.size() == shape.size(),
                 "[dist] DeviceMesh shape {} has {} dims but {} names were given ({})",
                 fmt::join(shape, "x"), shape.size(), dim_names.size(), fmt::join(dim_names, ", "));
  for (int s : shape) {
    FSDPP_CHECK_AS(ConfigError, s >= 1, "[dist] DeviceMesh dims must be >= 1; got {}",
                   fmt::join(shape, "x"));
  }
  FSDPP_CHECK_AS(ConfigError, product(shape) == world.size(),
                 "[dist] a DeviceMesh of shape {} covers {} ranks but the world has {}",
                 fmt::join(shape, "x"), product(shape), world.size());
  for (size_t i = 0; i < dim_names.size(); ++i) {
    FSDPP_CHECK_AS(ConfigError, !dim_names[i].empty(), "[dist] DeviceMesh dim {} has an empty name",
                   i);
    for (size_t j = 0; j < i; ++j) {
      FSDPP_CHECK_AS(ConfigError, dim_names[i] != dim_names[j],
                     "[dist] DeviceMesh dim names must differ; got '{}' twice in ({})",
                     dim_names[i], fmt::join(dim_names, ", "));
    }
  }
  Root& root = *root_;
  root.world = &world;
  root.shape = shape;
  root.names = dim_names;
  root.coordinate.resize(shape.size());
  int rest = world.rank();
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    root.coordinate[d] = rest % shape[d];
    rest /= shape[d];
  }
  // Taken before any group is made, on every rank alike, so that group names stay in step.
  root.id = world.next_mesh_id();
  dims_.resize(shape.size());
  std::iota(dims_.begin(), dims_.end(), 0);
  shape_ = std::move(shape);
  dim_names_ = std::move(dim_names);
  coordinate_ = root.coordinate;
  // A 1-D mesh over the world is the world's own group.
  if (ndim() == 1) root.groups[{0}] = world.group();
  // Every rank makes its groups in dim order; the members of each group reach it at the same
  // point of that order, so no rank waits on a group whose other members are busy elsewhere.
  for (int d = 0; d < ndim(); ++d) groups_.push_back(group_over({d}));
}

DeviceMesh::DeviceMesh(std::shared_ptr<Root> root, std::vector<int> dims)
    : root_(std::move(root)), dims_(std::move(dims)) {
  for (int d : dims_) {
    shape_.push_back(root_->shape[d]);
    dim_names_.push_back(root_->names[d]);
    coordinate_.push_back(root_->coordinate[d]);
    groups_.push_back(root_->groups.at({d}));
  }
}

int DeviceMesh::size() const { return product(shape_); }

int DeviceMesh::dim_index(const std::string& name) const {
  for (int d = 0; d < ndim(); ++d) {
    if (dim_names_[d] == name) return d;
  }
  FSDPP_THROW(ConfigError, "[dist] DeviceMesh has no dim '{}'; its dims are {}", name,
              fmt::join(dim_names_, ", "));
}

std::vector<int> DeviceMesh::root_dims(const std::vector<std::string>& names,
                                       const char* what) const {
  FSDPP_CHECK_AS(ConfigError, !names.empty(), "[dist] DeviceMesh::{} needs at least one dim name",
                 what);
  std::vector<int> out;
  for (const auto& name : names) {
    const int d = dim_index(name);  // throws naming the known dims
    FSDPP_CHECK_AS(ConfigError, out.empty() || dims_[d] > out.back(),
                   "[dist] DeviceMesh::{}({}): dims must be distinct and in the mesh's order ({})",
                   what, fmt::join(names, ", "), fmt::join(dim_names_, ", "));
    out.push_back(dims_[d]);
  }
  return out;
}

std::vector<int> DeviceMesh::members_over(const std::vector<int>& dims) const {
  // Walk the coordinates of `dims` row-major with every other root dim fixed at this rank's.
  const auto& shape = root_->shape;
  std::vector<int> coord = root_->coordinate;
  for (int d : dims) coord[d] = 0;
  std::vector<int> members;
  for (;;) {
    int rank = 0;
    for (size_t d = 0; d < shape.size(); ++d) rank = rank * shape[d] + coord[d];
    members.push_back(rank);
    int k = static_cast<int>(dims.size()) - 1;
    for (; k >= 0; --k) {
      if (++coord[dims[k]] < shape[dims[k]]) break;
      coord[dims[k]] = 0;
    }
    if (k < 0) return members;
  }
}

const std::shared_ptr<ProcessGroup>& DeviceMesh::group_over(const std::vector<int>& dims) {
  auto& root = *root_;
  if (auto it = root.groups.find(dims); it != root.groups.end()) return it->second;
  // Which group along `dims` this is: the row-major index of this rank's other coordinates.
  int fixed = 0;
  std::vector<std::string> names;
  for (size_t d = 0; d < root.shape.size(); ++d) {
    if (std::find(dims.begin(), dims.end(), static_cast<int>(d)) == dims.end()) {
      fixed = fixed * root.shape[d] + root.coordinate[d];
    } else {
      names.push_back(root.names[d]);
    }
  }
  const std::string name =
      dims.size() == 1 ? fmt::format("mesh{}/{}/{}", root.id, names[0], fixed)
                       : fmt::format("mesh{}/flat/{}/{}", root.id, fmt::join(names, "+"), fixed);
  auto group = root.world->new_group(members_over(dims), name);
  FSDPP_CHECK(group != nullptr, "[dist] mesh group '{}' does not hold this rank", name);
  return root.groups[dims] = std::move(group);
}

const std::shared_ptr<ProcessGroup>& DeviceMesh::group(const std::string& name) const {
  for (int d = 0; d < ndim(); ++d) {
    if (dim_names_[d] == name) return groups_[d];
  }
  if (auto it = root_->flat_names.find(name); it != root_->flat_names.end()) {
    const auto& dims = it->second;
    const bool inside = std::all_of(dims.begin(), dims.end(), [&](int d) {
      return std::find(dims_.begin(), dims_.end(), d) != dims_.end();
    });
    if (inside) return root_->groups.at(dims);
  }
  std::vector<std::string> flat;
  for (const auto& [n, dims] : root_->flat_names) {
    if (std::all_of(dims.begin(), dims.end(), [&](int d) {
          return std::find(dims_.begin(), dims_.end(), d) != dims_.end();
        })) {
      flat.push_back(n);
    }
  }
  FSDPP_THROW(ConfigError, "[dist] DeviceMesh has no dim or flattened group '{}'; its dims are {}{}",
              name, fmt::join(dim_names_, ", "),
              flat.empty() ? std::string() : fmt::format(" and its flattened groups {}", fmt::join(flat, ", ")));
}

std::vector<int> DeviceMesh::group_ranks(int dim) const { return groups_.at(dim)->global_ranks(); }

std::vector<int> DeviceMesh::group_ranks(const std::string& name) const {
  return group(name)->global_ranks();
}

std::vector<int> DeviceMesh::ranks() const { return members_over(dims_); }

std::shared_ptr<DeviceMesh> DeviceMesh::sub(const std::vector<std::string>& dims) const {
  return std::shared_ptr<DeviceMesh>(new DeviceMesh(root_, root_dims(dims, "sub")));
}

std::shared_ptr<ProcessGroup> DeviceMesh::flatten(const std::vector<std::string>& dims,
                                                  const std::string& name) {
  const std::vector<int> over = root_dims(dims, "flatten");
  FSDPP_CHECK_AS(ConfigError, !name.empty(), "[dist] DeviceMesh::flatten({}) needs a name",
                 fmt::join(dims, ", "));
  FSDPP_CHECK_AS(ConfigError,
                 std::find(root_->names.begin(), root_->names.end(), name) == root_->names.end() ||
                     (over.size() == 1 && root_->names[over[0]] == name),
                 "[dist] DeviceMesh::flatten({}): the name '{}' is already a dim of the mesh ({})",
                 fmt::join(dims, ", "), name, fmt::join(root_->names, ", "));
  if (auto it = root_->flat_names.find(name); it != root_->flat_names.end()) {
    FSDPP_CHECK_AS(ConfigError, it->second == over,
                   "[dist] DeviceMesh::flatten({}): the name '{}' already names another set of "
                   "dims",
                   fmt::join(dims, ", "), name);
  }
  auto group = group_over(over);
  root_->flat_names[name] = over;
  return group;
}

}  // namespace fsdpp::dist
