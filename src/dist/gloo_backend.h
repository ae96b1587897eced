#pragma once
// Gloo, the CPU backend: c10d's ProcessGroupGloo plus what it lacks (AVG, a reduce-scatter that
// moves (N-1)/N of the buffer instead of all-reducing all of it).

#include "backend.h"

namespace fsdpp::dist::detail {

// Binds to GLOO_SOCKET_IFNAME, else options.gloo_hostname, else loopback when the master
// address is a loopback one, else this host's name.
std::shared_ptr<Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int size, const ProcessGroup::Options& options);

}  // namespace fsdpp::dist::detail
