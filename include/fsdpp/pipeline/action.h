#pragma once
// One step of a pipeline schedule on one rank, as PyTorch's torch.distributed.pipelining
// `_Action`: a stage, what to do, and for which microbatch.
//
//   F  forward                    SEND_F / RECV_F  activation to stage s+1 / from stage s-1
//   B  full backward              SEND_B / RECV_B  input gradient to stage s-1 / from stage s+1
//   I  backward for the inputs    UNSHARD / RESHARD  FSDP all-gather / free of the stage's params
//   W  backward for the weights   REDUCE_GRAD        FSDP reduce-scatter of the stage's gradients
//
// A zero-bubble schedule splits B into I (the input gradient, which the previous stage waits
// for) and W (the weight gradient, which nobody waits for and so can fill idle time).
// The text form is PyTorch's: stage, kind, microbatch with no separators ("0F1", "3RECV_B12");
// UNSHARD, RESHARD and REDUCE_GRAD act on the whole stage and carry no microbatch ("2UNSHARD").
// A send names the sending stage and a recv the receiving one, so SEND_F of stage s is matched
// by RECV_F of stage s+1 and SEND_B of stage s by RECV_B of stage s-1 (as PyTorch does).

#include <cstdint>
#include <string>
#include <string_view>

namespace fsdpp::pipeline {

enum class ActionKind : std::uint8_t {
  F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD,
};

struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::F;
  int microbatch = -1;  // -1 for the stage-wide UNSHARD, RESHARD and REDUCE_GRAD

  bool operator==(const Action&) const = default;
};

std::string_view kind_name(ActionKind kind);  // "F", "RECV_B", ...

// F, B, I, W: work that takes time. The others are communication or FSDP bookkeeping.
bool is_compute(ActionKind kind);
bool is_backward(ActionKind kind);  // B or I: produces the input gradient
bool is_send(ActionKind kind);
bool is_recv(ActionKind kind);
bool is_stage_wide(ActionKind kind);  // UNSHARD, RESHARD, REDUCE_GRAD

// "0F1" / "2UNSHARD".
std::string to_string(const Action& action);
// For messages: "RECV_F stage 1 microbatch 2" / "UNSHARD stage 2".
std::string describe(const Action& action);
// The inverse of to_string; a token that does not parse is an fsdpp::Error naming it.
Action parse_action(std::string_view token);

}  // namespace fsdpp::pipeline
