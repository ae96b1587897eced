#pragma once
// A process group carried from an autograd Function's forward to its backward: saved_data holds
// IValues only, and the backward runs after forward has returned, so the context owns a
// reference to the group (as a capsule). Tensor parallelism's regions and expert parallelism's
// all-to-alls use it.
//
//   save_group(ctx, group, "attention");           // in forward
//   const auto& g = load_group(ctx);               // in backward: g.group, g.what

#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <memory>
#include <string>
#include <utility>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist {

struct GroupCapsule : torch::CustomClassHolder {
  std::shared_ptr<ProcessGroup> group;
  std::string what;  // names the collective in errors and traces
};

inline void save_group(torch::autograd::AutogradContext* ctx,
                       const std::shared_ptr<ProcessGroup>& group, const std::string& what) {
  auto c = c10::make_intrusive<GroupCapsule>();
  c->group = group;
  c->what = what;
  ctx->saved_data["group"] = c10::IValue::make_capsule(std::move(c));
}

inline const GroupCapsule& load_group(torch::autograd::AutogradContext* ctx) {
  return *static_cast<GroupCapsule*>(ctx->saved_data["group"].toCapsule().get());
}

}  // namespace fsdpp::dist
