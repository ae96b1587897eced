#include "fsdpp/dist/gloo_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "fsdpp/common/error.h"
#include "fsdpp/common/host_address.h"

namespace fsdpp::dist {
namespace {

std::string to_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

}  // namespace

std::string interface_address(const std::string& ifname, std::string* available) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  std::set<std::string> names;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    names.insert(i->ifa_name);
    if (ifname != i->ifa_name) continue;
    if (family == AF_INET && v4.empty()) v4 = to_text(i->ifa_addr);
    // A link-local IPv6 address needs a scope id that a host name cannot carry.
    if (family == AF_INET6 && v6.empty() &&
        !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr)) {
      v6 = to_text(i->ifa_addr);
    }
  }
  ::freeifaddrs(list);
  if (available != nullptr) {
    available->clear();
    for (const auto& n : names) *available += (available->empty() ? "" : ", ") + n;
  }
  return v4.empty() ? v6 : v4;
}

std::string route_source_address(const std::string& host, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    if (why) *why = fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc));
    return "";
  }
  std::string out;
  for (addrinfo* ai = found; ai != nullptr && out.empty(); ai = ai->ai_next) {
    const int sock = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::connect(sock, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(sock, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      out = to_text(reinterpret_cast<sockaddr*>(&local));
    } else if (why) {
      *why = std::strerror(errno);
    }
    ::close(sock);
  }
  ::freeaddrinfo(found);
  return out;
}

std::string gloo_bind_address(const std::string& master_addr, const EnvLookup& getenv) {
  if (auto v = getenv("GLOO_SOCKET_IFNAME"); v && !v->empty()) return "";
  if (auto v = getenv("FSDPP_SOCKET_IFNAME"); v && !v->empty()) {
    std::string available;
    std::string addr = interface_address(*v, &available);
    FSDPP_CHECK_AS(ConfigError, !addr.empty(),
                   "[dist] FSDPP_SOCKET_IFNAME={}: no such interface with an address on this host; "
                   "interfaces with one: {}",
                   *v, available.empty() ? "none" : available);
    return addr;
  }
  if (is_loopback(master_addr)) return "";
  std::string why;
  std::string addr = route_source_address(master_addr, &why);
  FSDPP_CHECK_AS(CommError, !addr.empty(),
                 "[dist] no route from this host to MASTER_ADDR={} ({}); set FSDPP_SOCKET_IFNAME "
                 "to the network interface that reaches it",
                 master_addr, why);
  return addr;
}

}  // namespace fsdpp::dist
