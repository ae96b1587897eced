#include "backend.h"

#include <utility>

#include "fsdpp/common/error.h"
#include "gloo_backend.h"
#include "nccl_backend.h"

namespace fsdpp::dist::detail {

Backend::Backend(c10::intrusive_ptr<c10d::Backend> c10d, int rank, int size,
                 std::chrono::milliseconds timeout)
    : c10d_(std::move(c10d)), rank_(rank), size_(size), timeout_(timeout) {}

Backend::~Backend() = default;

std::shared_ptr<Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                      int size, const ProcessGroup::Options& options) {
  switch (options.backend) {
    case BackendKind::GLOO: return make_gloo_backend(store, rank, size, options);
    case BackendKind::NCCL: return make_nccl_backend(store, rank, size, options);
  }
  FSDPP_THROW(ConfigError, "[dist] group '{}': unknown backend {}", options.name,
              static_cast<int>(options.backend));
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return c10d::ReduceOp::SUM;
    case ReduceOp::AVG: return c10d::ReduceOp::AVG;
    case ReduceOp::MAX: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

void wait_c10d(const c10::intrusive_ptr<c10d::Work>& work) {
  work->wait();
  work->synchronize();
}

}  // namespace fsdpp::dist::detail
