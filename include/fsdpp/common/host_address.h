#pragma once
// What an address (MASTER_ADDR, a store's host) says of this machine, without a DNS lookup that
// could block: the launch environments ask whether a job's store is on this host, the Gloo
// transport whether ranks meet over loopback.

#include <string>

namespace fsdpp {

// localhost, 127.x.y.z or ::1.
bool is_loopback(const std::string& addr);

// A loopback address, this host's name, or a numeric address one of its interfaces has. A name
// other than this host's is taken as another host (it is not resolved).
bool names_this_host(const std::string& addr);

}  // namespace fsdpp
