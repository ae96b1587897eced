#pragma once
// Causal attention over a sequence split across the ranks of a context-parallel (cp) group, in
// the head-tail layout of sequence_layout.h: each rank holds T/W of the queries, keys and values
// and gets the output of its own queries, equal to attention over the whole sequence. An
// autograd Function per method, whose backward is written out (not autograd through the
// collectives), so loss.backward() gives each rank the gradients of its own q, k and v slices.
//
//   auto out = cp::context_attention(q, k, v, cp_group, {.method = cp::CpMethod::RING});
//
// q (B, H, T/W, D); k, v (B, Hkv, T/W, D), H a multiple of Hkv (grouped-query attention: query
// head h reads key/value head h / (H/Hkv)); the scale is D^-0.5 (SDPA's default); the mask is
// causal over the global positions (a query at position p sees the keys at positions <= p).
// The result is (B, H, T/W, D) in q's dtype; the arithmetic is float32 whatever the dtype.
//
// The two methods (docs/context-parallel.md), per call on each of W ranks, K/V block = this
// rank's k and v (2 x B·Hkv·(T/W)·D elements):
//
//   ALLGATHER  forward: 2 all-gathers (k, v), attention of the local queries against all T keys;
//              backward: dq here, dk and dv of the whole sequence reduce-scattered (2) back to
//              their owners. Holds every rank's K/V from forward to backward (W blocks).
//   RING       forward: W-1 steps, each sending this rank's current K/V block to the next rank
//              and receiving the previous rank's (2(W-1) sends), attending to each block as it
//              passes (blocks after every local query skipped), partial outputs merged by their
//              log-sum-exp; backward: the blocks go round again, each with its dk/dv
//              accumulator, which one more hop brings home (2(W-1) + 2W sends). Holds two blocks
//              at a time, never every rank's.
//
// Not yet: masks other than causal (documents packed into one row), attention dropout, a
// scale other than D^-0.5; the models do not call it yet (docs/context-parallel.md).

#include <ATen/Tensor.h>

#include <memory>
#include <string>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::cp {

using GroupPtr = std::shared_ptr<dist::ProcessGroup>;

enum class CpMethod { ALLGATHER, RING };
const char* to_string(CpMethod method);

struct ContextAttentionOptions {
  CpMethod method = CpMethod::ALLGATHER;
  // Names the layer in collective errors and traces ("layers.3.attention").
  std::string what = "cp";
};

// Shapes, head counts and the group are checked (ConfigError naming them) before anything is
// sent; every rank of the group calls it with the same shapes and method.
at::Tensor context_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const GroupPtr& group, const ContextAttentionOptions& options = {});

}  // namespace fsdpp::cp
