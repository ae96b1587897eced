#include "fsdpp/cp/sequence_layout.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"

namespace fsdpp::cp {
namespace {

void check_rank(int rank, int world) {
  FSDPP_CHECK_AS(ConfigError, world >= 1 && rank >= 0 && rank < world,
                 "[cp] rank {} of a context-parallel group of {} ranks; expected 0 <= rank < "
                 "degree", rank, world);
}

int64_t wrap_dim(int64_t dim, const at::Tensor& x) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  FSDPP_CHECK_AS(ConfigError, d >= 0 && d < x.dim(),
                 "[cp] sequence dimension {} of a tensor of {} dims", dim, x.dim());
  return d;
}

}  // namespace

HeadTail head_tail_chunks(int rank, int world) {
  check_rank(rank, world);
  return {rank, 2 * static_cast<int64_t>(world) - 1 - rank};
}

int64_t chunk_length(int64_t length, int world) {
  FSDPP_CHECK_AS(ConfigError, world >= 1 && length > 0 && length % (2 * world) == 0,
                 "[cp] the sequence length {} is not divisible by 2 x the context-parallel degree "
                 "{} = {}: head-tail load balancing cuts it into {} equal chunks",
                 length, world, 2 * world, 2 * world);
  return length / (2 * world);
}

at::Tensor shard_sequence(const at::Tensor& x, int64_t dim, int rank, int world) {
  dim = wrap_dim(dim, x);
  const auto chunks = head_tail_chunks(rank, world);
  const int64_t c = chunk_length(x.size(dim), world);
  return at::cat({x.narrow(dim, chunks.head * c, c), x.narrow(dim, chunks.tail * c, c)}, dim)
      .contiguous();
}

at::Tensor unshard_sequence(const std::vector<at::Tensor>& pieces, int64_t dim) {
  FSDPP_CHECK_AS(ConfigError, !pieces.empty(), "[cp] unshard_sequence of no pieces");
  const int world = static_cast<int>(pieces.size());
  dim = wrap_dim(dim, pieces[0]);
  const int64_t local = pieces[0].size(dim);
  for (int r = 0; r < world; ++r) {
    FSDPP_CHECK_AS(ConfigError, pieces[r].size(dim) == local && local % 2 == 0,
                   "[cp] unshard_sequence: rank {}'s piece has {} tokens along dim {} and rank "
                   "0's {}; every piece holds two equal chunks", r, pieces[r].size(dim), dim,
                   local);
  }
  const int64_t c = local / 2;
  std::vector<at::Tensor> chunks(2 * world);
  for (int r = 0; r < world; ++r) {
    const auto owned = head_tail_chunks(r, world);
    chunks[owned.head] = pieces[r].narrow(dim, 0, c);
    chunks[owned.tail] = pieces[r].narrow(dim, c, c);
  }
  return at::cat(chunks, dim);
}

at::Tensor sequence_positions(int64_t length, int rank, int world) {
  const auto chunks = head_tail_chunks(rank, world);
  const int64_t c = chunk_length(length, world);
  return at::cat({at::arange(chunks.head * c, (chunks.head + 1) * c, at::kLong),
                  at::arange(chunks.tail * c, (chunks.tail + 1) * c, at::kLong)});
}

}  // namespace fsdpp::cp
