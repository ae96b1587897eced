#pragma once
// Private to src/state: the group a state-dict call runs over, and agreement on failure (every
// rank throws the same CheckpointError when any rank failed).

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/dist/process_group.h"
#include "fsdpp/dist/string_collectives.h"

namespace fsdpp::state::detail {

struct Comm {
  std::shared_ptr<dist::ProcessGroup> group;
  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
  bool multi() const { return size() > 1; }
  at::Device device() const {
    return group && group->backend_kind() == dist::BackendKind::NCCL ? at::Device(at::kCUDA)
                                                                     : at::Device(at::kCPU);
  }
};

inline const dist::CollectiveTag kStateTag{"state_dict"};

inline void broadcast_string(const Comm& c, std::string& s, int root) {
  if (c.multi()) dist::broadcast_string(*c.group, s, root, kStateTag);
}

// Every rank's string, in rank order.
inline std::vector<std::string> all_gather_strings(const Comm& c, const std::string& s) {
  return c.multi() ? dist::all_gather_strings(*c.group, s, kStateTag) : std::vector<std::string>{s};
}

// Runs `fn` (which must issue no collective) on this rank, then agrees: when any rank failed,
// every rank throws CheckpointError with the message of the lowest failing rank.
template <typename F>
void agreed(const Comm& c, F&& fn) {
  auto as_checkpoint_error = [&] {
    try {
      fn();
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& e) {
      throw CheckpointError(*e.what() ? e.what() : "[state] unknown error");
    }
  };
  if (!c.multi()) return as_checkpoint_error();
  dist::agree_on_failure(*c.group, "saving or loading a checkpoint", as_checkpoint_error,
                         dist::AgreedMessage::kShared);
}

}  // namespace fsdpp::state::detail
