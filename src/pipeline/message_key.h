#pragma once
// Private: the message a SEND or RECV moves, named by the stage that receives it, so that a
// SEND_F of stage s and the RECV_F of stage s+1 (or a SEND_B of s and the RECV_B of s-1) have
// the same key.

#include <compare>

#include "fsdpp/pipeline/action.h"

namespace fsdpp::pipeline::detail {

struct MessageKey {
  bool forward = true;  // an activation (F) or an input gradient (B)
  int to_stage = 0;
  int microbatch = 0;
  auto operator<=>(const MessageKey&) const = default;
};

inline MessageKey message_of(const Action& a) {
  switch (a.kind) {
    case ActionKind::SEND_F: return {true, a.stage + 1, a.microbatch};
    case ActionKind::RECV_F: return {true, a.stage, a.microbatch};
    case ActionKind::SEND_B: return {false, a.stage - 1, a.microbatch};
    default: return {false, a.stage, a.microbatch};  // RECV_B
  }
}

// The action on the other rank that completes `a`: the RECV for a SEND and the SEND for a RECV.
inline Action peer_of(const Action& a) {
  switch (a.kind) {
    case ActionKind::SEND_F: return {a.stage + 1, ActionKind::RECV_F, a.microbatch};
    case ActionKind::RECV_F: return {a.stage - 1, ActionKind::SEND_F, a.microbatch};
    case ActionKind::SEND_B: return {a.stage - 1, ActionKind::RECV_B, a.microbatch};
    default: return {a.stage + 1, ActionKind::SEND_B, a.microbatch};  // RECV_B
  }
}

}  // namespace fsdpp::pipeline::detail
