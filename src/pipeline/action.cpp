#include "fsdpp/pipeline/action.h"

#include <array>
#include <cctype>
#include <utility>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fsdpp::pipeline {
namespace {

constexpr std::array<std::pair<ActionKind, std::string_view>, 11> kNames{{
    {ActionKind::F, "F"},
    {ActionKind::B, "B"},
    {ActionKind::I, "I"},
    {ActionKind::W, "W"},
    {ActionKind::SEND_F, "SEND_F"},
    {ActionKind::RECV_F, "RECV_F"},
    {ActionKind::SEND_B, "SEND_B"},
    {ActionKind::RECV_B, "RECV_B"},
    {ActionKind::UNSHARD, "UNSHARD"},
    {ActionKind::RESHARD, "RESHARD"},
    {ActionKind::REDUCE_GRAD, "REDUCE_GRAD"},
}};

}  // namespace

std::string_view kind_name(ActionKind kind) {
  for (const auto& [k, name] : kNames)
    if (k == kind) return name;
  return "?";
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::F || kind == ActionKind::B || kind == ActionKind::I ||
         kind == ActionKind::W;
}
bool is_backward(ActionKind kind) { return kind == ActionKind::B || kind == ActionKind::I; }
bool is_send(ActionKind kind) { return kind == ActionKind::SEND_F || kind == ActionKind::SEND_B; }
bool is_recv(ActionKind kind) { return kind == ActionKind::RECV_F || kind == ActionKind::RECV_B; }
bool is_stage_wide(ActionKind kind) {
  return kind == ActionKind::UNSHARD || kind == ActionKind::RESHARD ||
         kind == ActionKind::REDUCE_GRAD;
}

std::string to_string(const Action& a) {
  if (is_stage_wide(a.kind)) return fmt::format("{}{}", a.stage, kind_name(a.kind));
  return fmt::format("{}{}{}", a.stage, kind_name(a.kind), a.microbatch);
}

std::string describe(const Action& a) {
  if (is_stage_wide(a.kind)) return fmt::format("{} stage {}", kind_name(a.kind), a.stage);
  return fmt::format("{} stage {} microbatch {}", kind_name(a.kind), a.stage, a.microbatch);
}

Action parse_action(std::string_view token) {
  auto bad = [&](std::string_view why) {
    FSDPP_THROW(Error, "[pipeline] action '{}' does not parse: {} (expected e.g. '0F1', "
                       "'1RECV_B3', '2UNSHARD')", token, why);
  };
  size_t i = 0;
  auto digits = [&](int& value) {
    size_t start = i;
    value = 0;
    while (i < token.size() && std::isdigit(static_cast<unsigned char>(token[i]))) {
      if (i - start >= 9) bad("a number is too long");
      value = value * 10 + (token[i] - '0');
      ++i;
    }
    return i > start;
  };
  Action a;
  if (!digits(a.stage)) bad("it does not start with a stage number");
  // The longest kind name that matches, so that no kind added later can shadow a longer one.
  size_t best = 0;
  for (const auto& [k, name] : kNames) {
    if (name.size() > best && token.substr(i, name.size()) == name) {
      best = name.size();
      a.kind = k;
    }
  }
  if (best == 0) bad("no action kind after the stage");
  i += best;
  if (is_stage_wide(a.kind)) {
    a.microbatch = -1;
    if (i != token.size()) bad("UNSHARD, RESHARD and REDUCE_GRAD take no microbatch");
    return a;
  }
  if (!digits(a.microbatch)) bad("no microbatch number after the kind");
  if (i != token.size()) bad("trailing characters");
  return a;
}

}  // namespace fsdpp::pipeline
