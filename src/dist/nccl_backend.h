#pragma once
// The NCCL backend lives in its own file so that only it includes NCCL's headers; without
// FSDPP_WITH_CUDA asking for it is an error that says so.

#include <chrono>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace fsdpp::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    int device_index);
bool cuda_available();

}  // namespace fsdpp::dist
