#include "fsdpp/dist/agree.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/string_collectives.h"
#include "comm_queue.h"  // detail::exception_text

namespace fsdpp::dist {
namespace {

// Codes exchanged: 0 is success; the kinds keep their exit codes on every rank.
enum Kind : int64_t { kOk = 0, kConfig = 1, kCheckpoint = 2, kOther = 3 };

Kind kind_of(const std::exception_ptr& e) {
  if (!e) return kOk;
  try {
    std::rethrow_exception(e);
  } catch (const ConfigError&) {
    return kConfig;
  } catch (const CheckpointError&) {
    return kCheckpoint;
  } catch (...) {
    return kOther;
  }
}

}  // namespace

void agree_outcome(ProcessGroup& group, std::string_view what, std::exception_ptr error,
                   AgreedMessage message) {
  const Kind mine = kind_of(error);
  if (group.size() == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  const auto device = group.backend_kind() == BackendKind::NCCL ? at::Device(at::kCUDA)
                                                                 : at::Device(at::kCPU);
  auto in = at::full({1}, static_cast<int64_t>(mine), at::TensorOptions(at::kLong)).to(device);
  auto all = at::empty({group.size()}, in.options());
  group.all_gather_into_tensor(all, in, {"agree_on_failure"});
  all = all.cpu();
  const auto* codes = all.data_ptr<int64_t>();
  for (int r = 0; r < group.size(); ++r) {
    if (codes[r] == kOk) continue;
    std::string msg;
    if (message == AgreedMessage::kShared) {
      if (r == group.rank()) msg = detail::exception_text(error);
      broadcast_string(group, msg, r, {"agree_on_failure"});
    }
    if (r == group.rank()) std::rethrow_exception(error);
    msg = message == AgreedMessage::kShared
              ? fmt::format("{} (reported by rank {})", msg, group.global_ranks()[r])
              : fmt::format("[dist] rank {} stopped: rank {} failed while {} (its own message "
                            "says why)",
                            group.global_rank(), group.global_ranks()[r], what);
    if (codes[r] == kConfig) throw ConfigError(msg);
    if (codes[r] == kCheckpoint) throw CheckpointError(msg);
    throw Error(msg);
  }
}

}  // namespace fsdpp::dist
