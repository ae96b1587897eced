#include "fsdpp/models/decoder_attention.h"

#include <ATen/ATen.h>

#include "decoder_parts.h"
#include "meta_modules.h"

namespace fsdpp::models {

DecoderAttentionImpl::DecoderAttentionImpl(const DecoderAttentionOptions& o, at::Device device)
    : n_heads(o.n_heads), n_kv_heads(o.n_kv_heads), head_dim(o.head_dim), where_(o.where) {
  using detail::make_linear;
  q_proj = register_module(o.names[0], make_linear(o.dim, n_heads * head_dim, device));
  k_proj = register_module(o.names[1], make_linear(o.dim, n_kv_heads * head_dim, device));
  v_proj = register_module(o.names[2], make_linear(o.dim, n_kv_heads * head_dim, device));
  o_proj = register_module(o.names[3], make_linear(n_heads * head_dim, o.dim, device));
  if (o.qk_norm_eps > 0) {
    q_norm = register_module("q_norm", RMSNorm(head_dim, o.qk_norm_eps, device));
    k_norm = register_module("k_norm", RMSNorm(head_dim, o.qk_norm_eps, device));
  }
}

std::array<at::Tensor, 3> DecoderAttentionImpl::rotated_qkv(const at::Tensor& x,
                                                            const Rotate& rotate) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = detail::project(q_proj, x, float8[0]).view({B, T, n_heads, head_dim});
  auto k = detail::project(k_proj, x, float8[1]).view({B, T, n_kv_heads, head_dim});
  auto v = detail::project(v_proj, x, float8[2]).view({B, T, n_kv_heads, head_dim});
  // The norms act on each head's vector, before RoPE (Qwen3's q_norm / k_norm).
  if (q_norm) q = q_norm(q);
  if (k_norm) k = k_norm(k);
  return {rotate(q), rotate(k), v};
}

at::Tensor DecoderAttentionImpl::project_out(const at::Tensor& y) {
  const int64_t B = y.size(0), T = y.size(2);
  return detail::project(o_proj, y.transpose(1, 2).reshape({B, T, n_heads * head_dim}), float8[3]);
}

at::Tensor DecoderAttentionImpl::attend(const at::Tensor& input, const Rotate& rotate,
                                        const at::Tensor& mask) {
  const auto x = parallel ? parallel->enter(input, where_.c_str()) : input;
  auto [q, k, v] = rotated_qkv(x, rotate);
  k = detail::repeat_kv(k, n_heads / n_kv_heads);
  v = detail::repeat_kv(v, n_heads / n_kv_heads);
  // (B,H,T,D) for attention; SDPA's default scale is head_dim^-0.5 (transformers' `scaling`).
  auto y = detail::causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask);
  const auto out = project_out(y);
  return parallel ? parallel->exit(out, where_.c_str()) : out;
}

at::Tensor DecoderAttentionImpl::attend_cached(const at::Tensor& x, const Rotate& rotate,
                                               KVCache::Layer& cache) {
  const auto [q, k, v] = rotated_qkv(x, rotate);
  return project_out(cached_attention(cache, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)));
}

}  // namespace fsdpp::models
