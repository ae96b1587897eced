#include "decoder_parts.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <ATen/core/Tensor.h>

#include <mutex>

namespace fsdpp::models::detail {

at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const auto B = x.size(0), T = x.size(1), Hkv = x.size(2), D = x.size(3);
  return x.unsqueeze(3).expand({B, T, Hkv, n_rep, D}).reshape({B, T, Hkv * n_rep, D});
}

at::Tensor rotate_pairs(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s) {
  auto x0 = xc.select(-1, 0), x1 = xc.select(-1, 1);
  return at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).flatten(-2);
}

at::Tensor rotate_pairs_complex(const at::Tensor& xc, const at::Tensor& c, const at::Tensor& s) {
  const auto z = at::view_as_complex(xc.contiguous());  // (B,T,H,D/2): x0 + i x1
  return at::view_as_real(z * at::complex(c, s)).flatten(-2);
}

GlobalRngRestorer::GlobalRngRestorer() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  state_ = gen.get_state();
}

GlobalRngRestorer::~GlobalRngRestorer() {
  try {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state_);
  } catch (...) {  // destructors never throw; losing the restore only costs reproducibility
  }
}

}  // namespace fsdpp::models::detail
