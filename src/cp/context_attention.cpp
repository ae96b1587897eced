#include "fsdpp/cp/context_attention.h"

#include "context_methods.h"
#include "fsdpp/common/error.h"

namespace fsdpp::cp {
namespace {

std::string shape_of(const at::Tensor& x) {
  std::string s = "(";
  for (int64_t i = 0; i < x.dim(); ++i) s += (i ? ", " : "") + std::to_string(x.size(i));
  return s + ")";
}

// q (B, H, S, D), k and v (B, Hkv, S, D) with H a multiple of Hkv and S this rank's two equal
// chunks; the group given.
void check_arguments(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const GroupPtr& group, const std::string& what) {
  FSDPP_CHECK_AS(ConfigError, group != nullptr, "[cp] {}: context_attention without a group",
                 what);
  FSDPP_CHECK_AS(ConfigError, q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes(),
                 "[cp] {}: q {}, k {}, v {}; expected q (B, H, T/W, D) and k, v of one shape "
                 "(B, Hkv, T/W, D)", what, shape_of(q), shape_of(k), shape_of(v));
  FSDPP_CHECK_AS(ConfigError, q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
                                  q.size(3) == k.size(3),
                 "[cp] {}: q {} and k {} differ in batch, local length or head dim", what,
                 shape_of(q), shape_of(k));
  FSDPP_CHECK_AS(ConfigError, k.size(1) > 0 && q.size(1) % k.size(1) == 0,
                 "[cp] {}: {} query heads are not a multiple of {} key/value heads", what,
                 q.size(1), k.size(1));
  FSDPP_CHECK_AS(ConfigError, q.size(2) > 0 && q.size(2) % 2 == 0,
                 "[cp] {}: the local length {} is not two equal chunks (head and tail); the "
                 "sequence must be cut by shard_sequence into 2 x {} chunks", what, q.size(2),
                 group->size());
}

}  // namespace

const char* to_string(CpMethod method) {
  switch (method) {
    case CpMethod::ALLGATHER: return "allgather";
    case CpMethod::RING: return "ring";
  }
  return "?";
}

at::Tensor context_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const GroupPtr& group, const ContextAttentionOptions& options) {
  check_arguments(q, k, v, group, options.what);
  switch (options.method) {
    case CpMethod::ALLGATHER: return detail::allgather_attention(q, k, v, group, options.what);
    case CpMethod::RING: return detail::ring_attention(q, k, v, group, options.what);
  }
  FSDPP_THROW(ConfigError, "[cp] {}: unknown context-parallel method {}", options.what,
              static_cast<int>(options.method));
}

}  // namespace fsdpp::cp
