#include "fsdpp/pipeline/stall_check.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "message_key.h"

namespace fsdpp::pipeline {
using detail::message_of;
using detail::MessageKey;
namespace {

constexpr std::chrono::milliseconds kReadInterval{250};

}  // namespace

StallCheck::StallCheck(const PipelineSchedule& schedule, int rank,
                       c10::intrusive_ptr<c10d::Store> store, std::string prefix,
                       std::chrono::milliseconds after)
    : schedule_(schedule), rank_(rank), store_(std::move(store)), prefix_(std::move(prefix)),
      after_(after) {
  std::map<MessageKey, std::pair<int, size_t>> sends;
  for (int r = 0; r < schedule_.num_ranks; ++r) {
    const auto& list = schedule_.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      if (is_send(list[i].kind)) sends[message_of(list[i])] = {r, i};
    }
  }
  for (int r = 0; r < schedule_.num_ranks; ++r) {
    const auto& list = schedule_.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      if (!is_recv(list[i].kind)) continue;
      if (auto it = sends.find(message_of(list[i])); it != sends.end()) sender_of_[{r, i}] = it->second;
    }
  }
}

std::optional<StallCheck::Position> StallCheck::read(int rank) const {
  const std::string key = fmt::format("{}/{}", prefix_, rank);
  if (!store_->check({key})) return std::nullopt;
  const auto bytes = store_->get(key);
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  Position p;
  if (!(in >> p.step >> p.index)) return std::nullopt;
  return p;
}

std::string StallCheck::where(int rank, long index) const {
  const auto& list = schedule_.actions[static_cast<size_t>(rank)];
  if (index >= static_cast<long>(list.size())) {
    return fmt::format("rank {} waits for its sends to be taken, after its last action", rank);
  }
  return fmt::format("rank {} waits at action {} ({})", rank, index,
                     describe(list[static_cast<size_t>(index)]));
}

std::optional<std::string> StallCheck::waiting(int64_t step, size_t index, Clock::time_point since) {
  const auto now = Clock::now();
  if (now - since < after_) return std::nullopt;
  if (!published_) {
    const std::string v = fmt::format("{} {}", step, index);
    store_->set(fmt::format("{}/{}", prefix_, rank_), std::vector<uint8_t>(v.begin(), v.end()));
    published_ = true;
    last_read_ = now;
    last_finding_.clear();
    return std::nullopt;
  }
  if (now - last_read_ < kReadInterval) return std::nullopt;
  last_read_ = now;
  auto finding = diagnose(step, index);
  if (!finding) {
    last_finding_.clear();
    return std::nullopt;
  }
  // The same finding on every read for `after` more (at least two reads, a poll apart): the
  // positions it rests on were held, not passing, and a message merely slow (a loaded host) has
  // had that long to arrive.
  if (*finding != last_finding_) {
    last_finding_ = *finding;
    finding_since_ = now;
    return std::nullopt;
  }
  if (now - finding_since_ < std::max<std::chrono::milliseconds>(after_, kReadInterval)) {
    return std::nullopt;
  }
  return fmt::format("[pipeline] schedule '{}' ({} ranks, {} stages, {} microbatches) is stuck in "
                     "step {} (rank {} has waited {:.1f} s): {}",
                     schedule_.name, schedule_.num_ranks, schedule_.num_stages,
                     schedule_.num_microbatches, step, rank_,
                     std::chrono::duration<double>(now - since).count(), *finding);
}

void StallCheck::done() {
  if (!published_) return;
  published_ = false;
  try {
    const std::string v = "0 -1";
    store_->set(fmt::format("{}/{}", prefix_, rank_), std::vector<uint8_t>(v.begin(), v.end()));
  } catch (...) {
    // The store is gone: so is the job; nobody reads this any more.
  }
}

std::optional<std::string> StallCheck::diagnose(int64_t step, size_t index) const {
  // Follow who waits for whom: from this rank's recv to the rank whose SEND it needs, and on.
  std::vector<std::string> chain{where(rank_, static_cast<long>(index))};
  std::set<int> seen{rank_};
  int r = rank_;
  long at = static_cast<long>(index);
  for (int hops = 0; hops <= schedule_.num_ranks; ++hops) {
    auto it = sender_of_.find({r, static_cast<size_t>(at)});
    if (it == sender_of_.end()) return std::nullopt;  // waiting for sends: its peers will tell
    const auto [q, j] = it->second;
    const auto& send = schedule_.actions[static_cast<size_t>(q)][j];
    std::optional<Position> pos;
    if (q == rank_) {
      pos = Position{step, static_cast<long>(index)};
    } else {
      pos = read(q);
    }
    if (!pos || pos->step < step || (pos->step == step && pos->index < 0)) {
      return std::nullopt;  // behind or busy: not stuck (yet)
    }
    if (pos->step > step || pos->index > static_cast<long>(j)) {
      // The sender went past its SEND: the message left and never arrived.
      chain.push_back(fmt::format("for the message that rank {} sent at its action {} ({}), and "
                                  "{}",
                                  q, j, describe(send),
                                  pos->step > step ? fmt::format("rank {} is in step {} already", q, pos->step)
                                                   : where(q, pos->index)));
      std::string text;
      for (size_t k = 0; k < chain.size(); ++k) text += (k ? ", " : "") + chain[k];
      return text + ". The schedule is consistent (verify() checked it) and the message was sent: "
                    "the communication below the pipeline lost or held it";
    }
    chain.push_back(fmt::format("for rank {}'s action {} ({}), and {}", q, j, describe(send),
                                where(q, pos->index)));
    if (seen.contains(q)) {
      std::string text = "the ranks wait for each other in a cycle: ";
      for (size_t k = 0; k < chain.size(); ++k) text += (k ? ", " : "") + chain[k];
      return text + ". verify() should have refused this order; please report it with the "
                    "schedule (pipeline::to_csv)";
    }
    seen.insert(q);
    r = q;
    at = pos->index;
  }
  return std::nullopt;
}

}  // namespace fsdpp::pipeline
