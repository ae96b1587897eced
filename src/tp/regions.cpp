#include "fsdpp/tp/regions.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/autograd_group.h"

namespace fsdpp::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using dist::load_group;
using dist::save_group;

at::Tensor all_reduce_sum(const at::Tensor& x, const GroupPtr& group, const std::string& what) {
  auto out = x.contiguous().clone();
  group->all_reduce(out, dist::ReduceOp::SUM, {what});
  return out;
}

int64_t wrap_dim(int64_t dim, const at::Tensor& x) { return dim < 0 ? dim + x.dim() : dim; }

at::Tensor all_gather_dim(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                          const std::string& what) {
  const int n = group->size();
  auto in = x.movedim(dim, 0).contiguous();  // (n_local, ...)
  auto sizes = in.sizes().vec();
  sizes[0] *= n;
  auto out = at::empty(sizes, in.options());  // (N*n_local, ...)
  group->all_gather_into_tensor(out, in, {what});
  return out.movedim(0, dim);
}

at::Tensor reduce_scatter_dim(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                              const std::string& what) {
  const int n = group->size();
  FSDPP_CHECK_AS(ConfigError, x.size(dim) % n == 0,
                 "[tp] {}: the sequence dimension (dim {}) has size {}, which the tensor-parallel "
                 "degree {} does not divide; sequence parallelism needs equal chunks",
                 what, dim, x.size(dim), n);
  auto in = x.movedim(dim, 0).contiguous();  // (N*n_local, ...)
  auto sizes = in.sizes().vec();
  sizes[0] /= n;
  auto out = at::empty(sizes, in.options());
  group->reduce_scatter_tensor(out, in, dist::ReduceOp::SUM, {what});
  return out.movedim(0, dim);
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const GroupPtr& group,
                            const std::string& what) {
    save_group(ctx, group, what);
    return x.view_as(x);  // a new node for autograd; no copy
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = load_group(ctx);
    return {all_reduce_sum(grads[0], g.group, g.what), at::Tensor(), at::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const GroupPtr& group,
                            const std::string& what) {
    return all_reduce_sum(x, group, what);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

// This rank's equal chunk along `dim` (checked), a view.
at::Tensor own_chunk(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                     const std::string& what) {
  const int n = group->size();
  FSDPP_CHECK_AS(ConfigError, x.size(dim) % n == 0,
                 "[tp] {}: the sequence dimension (dim {}) has size {}, which the tensor-parallel "
                 "degree {} does not divide; each rank takes an equal chunk",
                 what, dim, x.size(dim), n);
  const int64_t chunk = x.size(dim) / n;
  return x.narrow(dim, group->rank() * chunk, chunk);
}

at::Tensor chunk_dim(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                     const std::string& what) {
  return own_chunk(x, group, dim, what).contiguous();
}

// A region along `dim`: Forward in forward, Backward (its adjoint) on the gradient.
template <auto Forward, auto Backward>
struct DimRegion : torch::autograd::Function<DimRegion<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const GroupPtr& group,
                            int64_t dim, const std::string& what) {
    save_group(ctx, group, what);
    ctx->saved_data["dim"] = dim;
    return Forward(x, group, dim, what);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = load_group(ctx);
    return {Backward(grads[0], g.group, ctx->saved_data["dim"].toInt(), g.what), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

using GatherFromSequence = DimRegion<all_gather_dim, reduce_scatter_dim>;
using ScatterToSequence = DimRegion<reduce_scatter_dim, all_gather_dim>;
using ChunkOfWhole = DimRegion<chunk_dim, all_gather_dim>;
using WholeOfChunks = DimRegion<all_gather_dim, chunk_dim>;

}  // namespace

at::Tensor copy_to_region(const at::Tensor& x, const GroupPtr& group, const std::string& what) {
  return CopyToRegion::apply(x, group, what);
}

at::Tensor reduce_from_region(const at::Tensor& x, const GroupPtr& group,
                              const std::string& what) {
  return ReduceFromRegion::apply(x, group, what);
}

at::Tensor gather_from_sequence(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                                const std::string& what) {
  return GatherFromSequence::apply(x, group, wrap_dim(dim, x), what);
}

at::Tensor scatter_to_sequence(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                               const std::string& what) {
  dim = wrap_dim(dim, x);
  // Checked here too, so the error comes before autograd records anything.
  FSDPP_CHECK_AS(ConfigError, x.size(dim) % group->size() == 0,
                 "[tp] {}: the sequence dimension (dim {}) has size {}, which the tensor-parallel "
                 "degree {} does not divide; sequence parallelism needs equal chunks",
                 what, dim, x.size(dim), group->size());
  return ScatterToSequence::apply(x, group, dim, what);
}

at::Tensor chunk_of_whole(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                          const std::string& what) {
  dim = wrap_dim(dim, x);
  (void)own_chunk(x, group, dim, what);  // the error before autograd records anything
  return ChunkOfWhole::apply(x, group, dim, what);
}

at::Tensor whole_of_chunks(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                           const std::string& what) {
  return WholeOfChunks::apply(x, group, wrap_dim(dim, x), what);
}

ShardRange shard_range(int64_t size, int degree, int rank) {
  FSDPP_CHECK(degree > 0 && rank >= 0 && rank < degree,
              "[tp] shard_range: rank {} of degree {}", rank, degree);
  const int64_t base = size / degree, extra = size % degree;
  ShardRange r;
  r.size = base + (rank < extra ? 1 : 0);
  r.offset = rank * base + std::min<int64_t>(rank, extra);
  return r;
}

}  // namespace fsdpp::tp
