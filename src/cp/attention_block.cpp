#include "attention_block.h"

#include <ATen/ATen.h>

#include <limits>

namespace fsdpp::cp::detail {
namespace {

// Scaled scores (B, Hkv, G, Sq, Sk), -inf where masked.
at::Tensor block_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask,
                        double scale) {
  auto s = at::matmul(q, k.unsqueeze(2).transpose(-1, -2)) * scale;
  if (mask.defined()) s.masked_fill_(mask, -std::numeric_limits<float>::infinity());
  return s;
}

}  // namespace

at::Tensor causal_mask(const at::Tensor& qpos, const at::Tensor& kpos) {
  return kpos.unsqueeze(0) > qpos.unsqueeze(1);  // (Sq, Sk)
}

Partial attend_block(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask, double scale) {
  auto s = block_scores(q, k, mask, scale);
  auto lse = at::logsumexp(s, -1);  // finite: every row sees a key
  auto p = at::exp(s - lse.unsqueeze(-1));
  return {at::matmul(p, v.unsqueeze(2)), lse};
}

void merge_partial(Partial& acc, const Partial& part) {
  if (!acc.out.defined()) {
    acc = part;
    return;
  }
  auto lse = at::logaddexp(acc.lse, part.lse);
  acc.out = acc.out * at::exp(acc.lse - lse).unsqueeze(-1) +
            part.out * at::exp(part.lse - lse).unsqueeze(-1);
  acc.lse = lse;
}

BlockGrads block_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& mask, double scale, const at::Tensor& dout,
                          const at::Tensor& lse, const at::Tensor& delta) {
  auto p = at::exp(block_scores(q, k, mask, scale) - lse.unsqueeze(-1));  // (B,Hkv,G,Sq,Sk)
  auto dv = at::matmul(p.transpose(-1, -2), dout).sum(2);
  auto dp = at::matmul(dout, v.unsqueeze(2).transpose(-1, -2));
  auto ds = p * (dp - delta.unsqueeze(-1)) * scale;
  auto dq = at::matmul(ds, k.unsqueeze(2));
  auto dk = at::matmul(ds.transpose(-1, -2), q).sum(2);
  return {dq, dk, dv};
}

at::Tensor row_delta(const at::Tensor& dout, const at::Tensor& out) {
  return (dout.to(at::kFloat) * out.to(at::kFloat)).sum(-1);
}

at::Tensor group_heads(const at::Tensor& q, int64_t kv_heads) {
  const auto B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  return q.to(at::kFloat).reshape({B, kv_heads, H / kv_heads, S, D});
}

at::Tensor ungroup_heads(const at::Tensor& q) {
  return q.reshape({q.size(0), q.size(1) * q.size(2), q.size(3), q.size(4)});
}

}  // namespace fsdpp::cp::detail
