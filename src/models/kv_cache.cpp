// The attention over a KV cache (kv_cache.h).
#include "fsdpp/models/kv_cache.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"

namespace fsdpp::models {

at::Tensor cached_attention(KVCache::Layer& cache, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v) {
  FSDPP_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(1) % k.size(1) == 0,
              "[models] cached_attention: q {} and k {}; expected (B, H, t, D) and (B, Hkv, t, D) "
              "with Hkv dividing H",
              q.sizes(), k.sizes());
  cache.k = cache.k.defined() ? at::cat({cache.k, k}, 2) : k;
  cache.v = cache.v.defined() ? at::cat({cache.v, v}, 2) : v;
  const int64_t n_rep = q.size(1) / k.size(1);
  const auto keys = n_rep == 1 ? cache.k : cache.k.repeat_interleave(n_rep, 1);
  const auto values = n_rep == 1 ? cache.v : cache.v.repeat_interleave(n_rep, 1);
  const int64_t t = q.size(2), L = keys.size(2);
  if (t == L) {  // nothing cached before: the plain causal attention
    return at::scaled_dot_product_attention(q, keys, values, {}, 0.0, /*is_causal=*/true);
  }
  if (t == 1) {  // one new token sees every cached one
    return at::scaled_dot_product_attention(q, keys, values, {}, 0.0, /*is_causal=*/false);
  }
  // Query i (position L - t + i) sees keys 0 .. L - t + i.
  const auto opts = at::TensorOptions().dtype(at::kLong).device(q.device());
  const auto mask = at::arange(L, opts).unsqueeze(0) <= (at::arange(t, opts) + (L - t)).unsqueeze(1);
  return at::scaled_dot_product_attention(q, keys, values, mask, 0.0, /*is_causal=*/false);
}

}  // namespace fsdpp::models
