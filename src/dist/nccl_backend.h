#pragma once
// The NCCL backend lives in its own file so that only it includes NCCL's headers; without
// FSDPP_WITH_CUDA asking for it is an error that says so.

#include "backend.h"

namespace fsdpp::dist {

bool cuda_available();

namespace detail {
// Spins the calling thread's current CUDA stream for `cycles` GPU clock cycles: the delay the
// stream-race check puts before every collective of a group (FSDPP_DEBUG_COMM_DELAY_CYCLES).
// Error without FSDPP_WITH_CUDA.
void delay_current_cuda_stream(int64_t cycles);
}  // namespace detail

namespace detail {

// Buffers live on CUDA device options.device_index (-1: the current device). Without
// FSDPP_WITH_CUDA, or without a visible device: a ConfigError that says what to do instead.
std::shared_ptr<Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int size, const ProcessGroup::Options& options);

}  // namespace detail
}  // namespace fsdpp::dist
