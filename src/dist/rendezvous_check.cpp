#include "rendezvous_check.h"

#include <fmt/format.h>

#include <string_view>

#include "fsdpp/common/error.h"

namespace fsdpp::dist::detail {
namespace {

constexpr std::string_view kPrefix = "fsdpp/rdzv/";
// The first arrival's record ("<world size>\n<rank>\n<who>"), fixing the job's world size.
const std::string kFirst = std::string(kPrefix) + "first";
const std::string kArrived = std::string(kPrefix) + "arrived";
// "ok" once every rank has arrived; else the refusal every waiting rank repeats.
const std::string kDone = std::string(kPrefix) + "done";
const std::string kOk = "ok";

std::string claim_key(int rank) { return fmt::format("{}claim/{}", kPrefix, rank); }
std::string who_key(int rank) { return fmt::format("{}who/{}", kPrefix, rank); }

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

struct Record {
  int world_size = 0, rank = 0;
  std::string who;
};

std::string encode(const RendezvousSelf& self) {
  return fmt::format("{}\n{}\n{}", self.world_size, self.rank, self.who);
}

Record decode(const std::string& s) {
  Record r;
  const auto a = s.find('\n');
  const auto b = a == std::string::npos ? a : s.find('\n', a + 1);
  try {
    r.world_size = std::stoi(s.substr(0, a));
    r.rank = std::stoi(s.substr(a + 1, b - a - 1));
  } catch (const std::exception&) {
    r.world_size = -1;  // not an fsdpp record: said as such below
  }
  r.who = b == std::string::npos ? s : s.substr(b + 1);
  return r;
}

// Says `why` to every rank waiting for the others, then throws it here.
std::string first_line(const char* what) {
  std::string s = what;
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

[[noreturn]] void refuse(c10d::Store& store, const std::string& why) {
  try {
    store.set(kDone, bytes(why));
  } catch (const std::exception&) {
    // The refusal still stands here; the others time out naming the ranks that came.
  }
  throw ConfigError(why);
}

}  // namespace

std::optional<std::string> recorded_rank(c10d::Store& store, int rank) {
  if (!store.check({who_key(rank)})) return std::nullopt;
  return decode(text(store.get(who_key(rank)))).who;
}

void meet_at_rendezvous(c10d::Store& store, const RendezvousSelf& self,
                        std::chrono::milliseconds timeout) {
  const std::string me = fmt::format("rank {} ({})", self.rank, self.who);
  // One process per rank: a second claim is a launch mistake (two tasks given RANK=1).
  if (store.add(claim_key(self.rank), 1) > 1) {
    std::string other = "another process";
    try {
      store.wait({who_key(self.rank)}, std::chrono::seconds(2));
      other = decode(text(store.get(who_key(self.rank)))).who;
    } catch (const std::exception&) {
    }
    refuse(store, fmt::format("[dist] rank {} is claimed by two processes: {} and this one ({}). "
                              "Each process of a job needs its own rank: check how the tasks were "
                              "started (RANK, or the launcher's OMPI_COMM_WORLD_RANK, SLURM_PROCID, "
                              "PMI_RANK)",
                              self.rank, other, self.who));
  }
  store.set(who_key(self.rank), bytes(encode(self)));
  // The first arrival fixes the world size; compareSet returns it to everyone after.
  const Record first = decode(text(store.compareSet(kFirst, {}, bytes(encode(self)))));
  if (first.world_size != self.world_size) {
    refuse(store, fmt::format("[dist] the processes of this job disagree on the world size: {} was "
                              "started for {} ranks, rank {} ({}) for {}. Every process of a job "
                              "must be started with the same world size (one mpirun, srun or "
                              "fsdpp-run for all of them, with the same counts)",
                              me, self.world_size, first.rank, first.who, first.world_size));
  }
  const int64_t arrived = store.add(kArrived, 1);
  if (arrived > self.world_size) {
    refuse(store, fmt::format("[dist] more processes than the world size of {} reached the "
                              "rendezvous store ({} was number {}): two jobs share MASTER_ADDR/"
                              "MASTER_PORT, or one was started twice",
                              self.world_size, me, arrived));
  }
  if (arrived == self.world_size) store.set(kDone, bytes(kOk));
  try {
    store.wait({kDone}, timeout);
  } catch (const std::exception& e) {
    int64_t came = -1;
    try {
      came = store.add(kArrived, 0);
    } catch (const std::exception&) {
    }
    FSDPP_THROW(TimeoutError,
                "[dist] {}: {} of the {} ranks reached the rendezvous store within {} ms; the "
                "others were not started, died before it, or were given another MASTER_ADDR/"
                "MASTER_PORT ({})",
                me, came >= 0 ? std::to_string(came) : std::string("not all"), self.world_size,
                timeout.count(), first_line(e.what()));
  }
  const std::string done = text(store.get(kDone));
  if (done != kOk) throw ConfigError(fmt::format("{} (seen by {})", done, me));
}

}  // namespace fsdpp::dist::detail
