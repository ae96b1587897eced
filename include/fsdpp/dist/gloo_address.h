#pragma once
// Which local address a rank's Gloo device binds (and tells its peers to connect to). On one
// host loopback does; across hosts it must be an address the other hosts can reach, and a
// machine often has several (a management network, a fast interconnect, docker bridges).
// World uses gloo_bind_address() for every group it makes (World::gloo_address());
// docs/multi-node.md describes the choice for users.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace fsdpp::dist {

using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// In order: empty when GLOO_SOCKET_IFNAME is set (ProcessGroup hands that interface to Gloo
// itself); the IPv4 (else IPv6) address of interface FSDPP_SOCKET_IFNAME; empty for a loopback
// MASTER_ADDR (ProcessGroup binds 127.0.0.1); else the local address the kernel routes
// MASTER_ADDR from, i.e. the interface that reaches rank 0's host. Throws ConfigError for an
// unknown interface (naming those there are) and CommError when no route to MASTER_ADDR exists.
std::string gloo_bind_address(const std::string& master_addr, const EnvLookup& getenv);

// The address `ifname` has ("" if none), and the names of the interfaces with an address.
std::string interface_address(const std::string& ifname, std::string* available = nullptr);

// The local address a packet to `host` would leave from (a UDP connect sends nothing).
// Empty and *why set when there is no route or `host` does not resolve.
std::string route_source_address(const std::string& host, std::string* why = nullptr);

}  // namespace fsdpp::dist
