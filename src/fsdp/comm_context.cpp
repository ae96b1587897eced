#include "comm_context.h"

namespace fsdpp {

FSDPCommContext::FSDPCommContext(c10::Device device)
    : device_(device), copy_in_(dist::Stream::from_pool(device, /*high_priority=*/true)) {}

void FSDPCommContext::gathers_follow_compute() {
  copy_in_.wait(dist::Event::recorded_on(dist::Stream::current(device_)));
}

void FSDPCommContext::before_copy_in() {
  copy_in_.wait(all_gather_state_.copied_out);
  all_gather_state_ = {};
}

void FSDPCommContext::retire_gather(std::vector<at::Tensor> buffers) {
  if (!copy_in_.on_device()) return;  // CPU: freed now, as they always were
  // The previous one may go once the copy-in stream has waited for its copy-out.
  copy_in_.wait(all_gather_state_.copied_out);
  all_gather_state_.buffers = std::move(buffers);
  all_gather_state_.copied_out.record(dist::Stream::current(device_));
}

void FSDPCommContext::before_reduce() {
  if (!copy_in_.on_device() || !last_reduce_.valid()) return;  // CPU: never wait here
  last_reduce_.wait();
  last_reduce_ = dist::Work();
}

void FSDPCommContext::reduce_issued(const dist::Work& work) {
  if (copy_in_.on_device()) last_reduce_ = work;
}

}  // namespace fsdpp
