#include "decoder_parts.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>

#include <mutex>

namespace fsdpp::models::detail {

at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const auto B = x.size(0), T = x.size(1), Hkv = x.size(2), D = x.size(3);
  return x.unsqueeze(3).expand({B, T, Hkv, n_rep, D}).reshape({B, T, Hkv * n_rep, D});
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
