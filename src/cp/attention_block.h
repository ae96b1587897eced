#pragma once
// The arithmetic both methods of context_attention.h share: attention of a block of queries
// against a block of keys, its softmax statistics, the merge of partial results by log-sum-exp,
// and the backward of one block given the statistics of the whole row. All in float32, over the
// grouped layout: q (B, Hkv, G, Sq, D) with G = H / Hkv query heads per key/value head, k and
// v (B, Hkv, Sk, D).
//
// A query row's softmax over all its keys is assembled from blocks: each block gives its partial
// output out_i (normalised within the block) and lse_i = log(sum_block exp(score)); the whole is
// lse = log(sum_i exp(lse_i)) and out = sum_i exp(lse_i - lse) out_i. The backward of a block
// needs only that row's final lse and delta = rowsum(dout * out) (FlashAttention-2's):
//
//   p = exp(s - lse)    dv += p^T dout    dp = dout v^T    ds = p (dp - delta)
//   dq += scale ds k    dk += scale ds^T q
//
// Every query row must see at least one key of a block it is given (the callers skip blocks
// whose keys all come after their queries, and a row's own chunk holds its diagonal).

#include <ATen/Tensor.h>

#include <cstdint>

namespace fsdpp::cp::detail {

// The causal mask of queries at global positions qpos (Sq,) against keys at kpos (Sk,): true
// where a key comes after its query. A block whose keys all come before its queries needs none
// (pass an undefined mask).
at::Tensor causal_mask(const at::Tensor& qpos, const at::Tensor& kpos);

// One block's partial attention: out (B, Hkv, G, Sq, D), lse (B, Hkv, G, Sq).
struct Partial {
  at::Tensor out;
  at::Tensor lse;
};
Partial attend_block(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask, double scale);

// acc <- acc merged with part by their log-sum-exp; an empty acc takes part as it is.
void merge_partial(Partial& acc, const Partial& part);

// One block's share of the gradients. dq is (B, Hkv, G, Sq, D); dk and dv (B, Hkv, Sk, D),
// summed over the G query heads that read each key/value head.
struct BlockGrads {
  at::Tensor dq;
  at::Tensor dk;
  at::Tensor dv;
};
BlockGrads block_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, double scale, const at::Tensor& dout,
                          const at::Tensor& lse, const at::Tensor& delta);

// delta = rowsum(dout * out) (B, Hkv, G, Sq), in float32.
at::Tensor row_delta(const at::Tensor& dout, const at::Tensor& out);

// (B, H, S, D) -> float32 (B, Hkv, G, S, D), and back to (B, H, S, D).
at::Tensor group_heads(const at::Tensor& q, int64_t kv_heads);
at::Tensor ungroup_heads(const at::Tensor& q);

}  // namespace fsdpp::cp::detail
