#include "fsdp_param.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/deferred_init.h"

namespace fsdpp {

void FSDPParam::set_outer(OuterLayout layout) {
  const auto& placements = layout.placements;
  auto cur = whole_shape(shape, placements);
  const auto whole = cur;
  for (const auto& pl : placements) {
    FSDPP_CHECK(pl.group && pl.world == pl.group->size() && pl.rank == pl.group->rank() &&
                    pl.dim < static_cast<int>(cur.size()) && cur[pl.dim] == pl.size &&
                    pl.chunk * pl.world >= pl.size,
                "[fsdp] parameter '{}': its placement over '{}' (dim {} of size {}, {} of {} ranks) "
                "does not fit its whole shape {}", fqn, pl.mesh_dim, pl.dim, pl.size, pl.rank, pl.world,
                fmt::join(whole, "x"));
    cur[pl.dim] = pl.held();
  }
  FSDPP_CHECK(cur == shape, "[fsdp] parameter '{}' has shape {} but its placements leave {} of {}",
              fqn, fmt::join(shape, "x"), fmt::join(cur, "x"), fmt::join(whole, "x"));
  for (const auto& g : layout.replicas) {
    FSDPP_CHECK(g != nullptr, "[fsdp] parameter '{}': a replica group of its outer layout is null", fqn);
  }
  outer = std::move(layout);
}

FSDPParam::FSDPParam(std::string fqn_, at::Tensor param_, int shard_rank_, int shard_world_,
                     int64_t offset_)
    : fqn(std::move(fqn_)),
      param(std::move(param_)),
      offset(offset_),
      shard_rank(shard_rank_),
      shard_world(shard_world_) {
  shape = param.sizes().vec();
  requires_grad = param.requires_grad();
  FSDPP_CHECK(param.is_contiguous(), "[fsdp] parameter '{}' is not contiguous", fqn);
  if (!shape.empty()) {
    dim0 = shape[0];
    row_numel = dim0 == 0 ? 0 : param.numel() / dim0;
  }
  FSDPP_CHECK(param.numel() > 0, "[fsdp] parameter '{}' has no elements (shape {}); remove it or "
              "keep it out of the unit", fqn, param.sizes());
  chunk_rows = (dim0 + shard_world - 1) / shard_world;
}

int64_t FSDPParam::rows_of_rank(int k) const {
  return std::clamp<int64_t>(dim0 - k * chunk_rows, 0, chunk_rows);
}

void FSDPParam::init_shard(const at::Tensor& flat_shard, const at::Tensor& full,
                           const at::TensorOptions& unsharded_options, bool separate_unsharded) {
  separate_unsharded_ = separate_unsharded;
  std::vector<int64_t> shard_shape = shape;
  if (shard_shape.empty()) shard_shape = {1};
  shard_shape[0] = chunk_rows;
  shard = flat_shard.narrow(0, offset, shard_numel()).view(shard_shape);
  const int64_t rows = rows_of_rank(shard_rank);
  if (full.defined()) {
    shard.zero_();
    if (rows > 0) {
      shard.view({chunk_rows, row_numel}).narrow(0, 0, rows).copy_(
          full.reshape({dim0, row_numel}).narrow(0, shard_rank * chunk_rows, rows));
    }
  }
  if (!separate_unsharded_) {
    unsharded = shard.view(shape);
  } else {
    // The unsharded shape over storage of 0 bytes, on the device whose allocator gathering uses:
    // no parameter is ever allocated whole before its first gather.
    unsharded = at::empty({0}, unsharded_options.requires_grad(false));
    unsharded.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
  }
  rebind_data(param, shard);  // from the meta device to storage after to_empty
  on_shard_ = true;
}

void FSDPParam::copy_out(const at::Tensor& gathered_2d, const at::Tensor& dst_full) const {
  auto dst = dst_full.view({dim0, row_numel});
  for (int k = 0; k < shard_world; ++k) {
    const int64_t rows = rows_of_rank(k);
    if (rows == 0) continue;
    dst.narrow(0, k * chunk_rows, rows)
        .copy_(gathered_2d[k].narrow(0, offset, rows * row_numel).view({rows, row_numel}));
  }
}

void FSDPParam::copy_in_grad(const at::Tensor& grad, const at::Tensor& reduce_input_2d,
                             int64_t first_column) const {
  const int64_t column = offset - first_column;
  if (!grad.defined()) {
    reduce_input_2d.narrow(1, column, shard_numel()).zero_();
    return;
  }
  auto src = grad.reshape({dim0, row_numel});
  for (int k = 0; k < shard_world; ++k) {
    const int64_t rows = rows_of_rank(k);
    auto dst = reduce_input_2d[k].narrow(0, column, shard_numel()).view({chunk_rows, row_numel});
    if (rows > 0) dst.narrow(0, 0, rows).copy_(src.narrow(0, k * chunk_rows, rows));
    if (rows < chunk_rows) dst.narrow(0, rows, chunk_rows - rows).zero_();  // padding
  }
}

void FSDPParam::alloc_unsharded() {
  if (!separate_unsharded_) return;
  auto* storage = unsharded.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(unsharded.numel()) * unsharded.element_size();
  if (storage->nbytes() == nbytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

bool FSDPParam::aliasable(const at::Tensor& flat) const {
  const auto address = reinterpret_cast<uintptr_t>(flat.data_ptr()) + offset * flat.element_size();
  return separate_unsharded_ && shard_world == 1 && flat.scalar_type() == unsharded.scalar_type() &&
         flat.device() == unsharded.device() && address % 16 == 0;
}

void FSDPParam::alias_unsharded(const at::Tensor& flat) {
  FSDPP_CHECK(aliasable(flat), "[fsdp] parameter '{}' cannot point into the gathered buffer", fqn);
  auto* storage = unsharded.storage().unsafeGetStorageImpl();
  auto* at_offset = static_cast<char*>(flat.data_ptr()) + offset * flat.element_size();
  // The storage holds a reference to `flat`, so that a parameter that outlives its unit never
  // points into freed memory; the unit retires its own reference when it frees the parameters.
  auto* keep = new at::Tensor(flat);
  storage->set_data_ptr_noswap(at::DataPtr(at_offset, keep, [](void* t) { delete static_cast<at::Tensor*>(t); },
                                           flat.device()));
  storage->set_nbytes(static_cast<size_t>(numel()) * unsharded.element_size());
}

void FSDPParam::free_unsharded() {
  if (!separate_unsharded_) return;
  auto* storage = unsharded.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, unsharded.device()));
  storage->set_nbytes(0);
}

bool FSDPParam::unsharded_allocated() const {
  return !separate_unsharded_ || unsharded.storage().nbytes() > 0;
}

int64_t FSDPParam::unsharded_bytes() const {
  return separate_unsharded_ ? static_cast<int64_t>(unsharded.storage().nbytes()) : 0;
}

void FSDPParam::use_shard() {
  if (on_shard_) return;
  unsharded_grad_stash = param.grad();
  param.mutable_grad() = shard_grad_stash;
  shard_grad_stash = at::Tensor();
  param.set_data(shard);
  on_shard_ = true;
}

void FSDPParam::add_shard_grad(at::Tensor g) {
  at::Tensor& slot = on_shard_ ? param.mutable_grad() : shard_grad_stash;
  if (slot.defined()) {
    slot.add_(g);
  } else {
    slot = std::move(g);
  }
}

void FSDPParam::use_unsharded() {
  if (!on_shard_) return;
  shard_grad_stash = param.grad();
  param.mutable_grad() = unsharded_grad_stash;
  unsharded_grad_stash = at::Tensor();
  param.set_data(unsharded);
  on_shard_ = false;
}

}  // namespace fsdpp
