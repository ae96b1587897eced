#pragma once
// One parameter under FSDP.
//
// The registered parameter tensor (`param`) keeps its identity for the module's code and the
// optimizer, and its data is switched with set_data(): at rest it is this rank's padded dim-0
// shard, a view into the unit's flat shard buffer (so the flat buffer is the all-gather input
// with no copy); around compute it is `unsharded`, a tensor of the original shape (in the mixed
// precision param dtype, on the compute device) whose storage is freed (resized to 0 bytes) when
// resharded and re-allocated when gathered again. Tensors that autograd saved in forward share
// that storage, so in backward they see the re-gathered data. With one rank, no dtype change and
// no offload there is nothing to gather, and `unsharded` is the shard itself.

#include <ATen/Tensor.h>

#include <string>
#include <vector>

#include "fsdpp/fsdp/sharded_param.h"

namespace fsdpp {

// The whole parameter's shape from what this rank holds and the placements that cut it before
// FSDP (FullyShardOptions::outer_layout).
std::vector<int64_t> whole_shape(std::vector<int64_t> held, const std::vector<ShardPlacement>& outer);

class FSDPParam {
 public:
  // `flat_shard` is the unit's shard buffer; this parameter's shard is
  // flat_shard[offset, offset + shard_numel()).
  FSDPParam(std::string fqn, at::Tensor param, int shard_rank, int shard_world, int64_t offset);

  std::string fqn;             // relative to the unit's module until the root names it fully
  at::Tensor param;            // the registered parameter
  std::vector<int64_t> shape;  // unsharded shape (what this rank holds: TP/EP-local)
  OuterLayout outer;  // how TP/EP cut or replicated the whole parameter first
  int64_t dim0 = 1;            // rows along dim 0 (1 for a 0-dim parameter)
  int64_t row_numel = 1;       // elements per row
  int64_t chunk_rows = 1;      // rows per rank: ceil(dim0 / shard_world)
  int64_t offset = 0;          // in the unit's flat shard
  int shard_rank = 0;
  int shard_world = 1;
  bool requires_grad = true;

  // Records how tensor or expert parallelism cut this parameter; they must produce its shape.
  void set_outer(OuterLayout layout);

  int64_t shard_numel() const { return chunk_rows * row_numel; }
  int64_t numel() const { return dim0 * row_numel; }
  // Rows of the unsharded parameter that rank k holds (the rest of its chunk is padding).
  int64_t rows_of_rank(int k) const;

  // Binds the shard view into the unit's flat buffer and fills it from `full` (the whole
  // parameter this rank held before; undefined: left as the buffer holds it, as for a parameter
  // on the meta device, whose values come after to_empty); `unsharded_options` (dtype, device)
  // are those of the gathered parameter, and `separate_unsharded` says whether it needs storage
  // of its own.
  void init_shard(const at::Tensor& flat_shard, const at::Tensor& full,
                  const at::TensorOptions& unsharded_options, bool separate_unsharded);
  // Copies every rank's rows from the gathered (shard_world, total) buffer into `dst` (the
  // unsharded shape), converting dtype and device: into `unsharded` when gathering, into a
  // fresh tensor for state dicts.
  void copy_out(const at::Tensor& gathered_2d, const at::Tensor& dst) const;
  // Writes this parameter's columns of the (shard_world, total) reduce input, which may be
  // uninitialised: its unsharded gradient and zeros for the padding rows, or zeros throughout
  // when `grad` is undefined (frozen, or no gradient reached it).
  // The input may cover only a bucket of the unit's columns, the first of them `first_column`.
  void copy_in_grad(const at::Tensor& grad, const at::Tensor& reduce_input_2d,
                    int64_t first_column = 0) const;

  void alloc_unsharded();
  // One rank: points `unsharded` at its place in the unit's converted flat shard `flat` (the
  // whole parameter set in the param dtype) instead of copying it out; the unit keeps `flat`
  // until free_unsharded(). aliasable() says whether that place is 16-byte aligned, as the
  // vectorised kernels and cuBLAS want their operands.
  bool aliasable(const at::Tensor& flat) const;
  void alias_unsharded(const at::Tensor& flat);
  void free_unsharded();
  bool unsharded_allocated() const;
  int64_t unsharded_bytes() const;

  // Points the registered parameter at the shard or the unsharded tensor, swapping the
  // gradient that belongs with each: the shard gradient (what the optimizer sees) and the
  // unsharded gradient (what autograd accumulates into).
  void use_shard();
  void use_unsharded();
  // Adds a reduced gradient shard to the shard gradient (the optimizer's, or the stash while
  // the parameter is unsharded), taking `g` itself when there is none yet.
  void add_shard_grad(at::Tensor g);
  bool on_shard() const { return on_shard_; }

  at::Tensor shard;      // (chunk_rows, rest...) view into the flat shard
  at::Tensor unsharded;  // original shape; storage freed while resharded
  at::Tensor shard_grad_stash;      // held while the parameter is unsharded
  at::Tensor unsharded_grad_stash;  // held while sharded (gradient accumulation without sync)

 private:
  bool on_shard_ = true;
  bool separate_unsharded_ = false;
};

}  // namespace fsdpp
