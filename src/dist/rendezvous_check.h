#pragma once
// The ranks' first meeting on the job's store, before any process group: are they one job?
//
// Processes started with different world sizes (two mpiruns, an OMPI_COMM_WORLD_SIZE of 2 on one
// host and 3 on another) or two processes given the same rank used to meet only in Gloo's
// connection set-up, which waited out the timeout and named neither. Here each rank records
// itself on the store: the first to arrive fixes the world size, a rank that brings another one
// or a rank already taken says so by name (the others wake and say it too), and a rank whose
// peers do not come within the timeout says how many of them did. A few store calls per rank.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace fsdpp::dist::detail {

struct RendezvousSelf {
  int rank = 0;
  int world_size = 1;
  // How this process was placed, for messages: "pid 4242 on host a; Open MPI: rank 1 of 3
  // (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)".
  std::string who;
};

// Every rank calls it once, right after it reaches the store. Returns when all world_size ranks
// have arrived with the same world size. Throws ConfigError naming both processes when the ranks
// disagree on the world size or two processes claim one rank, TimeoutError saying how many ranks
// arrived when the others do not within `timeout` (store calls that fail propagate).
void meet_at_rendezvous(c10d::Store& store, const RendezvousSelf& self,
                        std::chrono::milliseconds timeout);

// What rank `rank` of a job using `store` recorded of itself ("" when none did): for a rank 0
// that could not host the store because another process is there already.
std::optional<std::string> recorded_rank(c10d::Store& store, int rank);

}  // namespace fsdpp::dist::detail
