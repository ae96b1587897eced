// Network interface selection for Gloo (docs/multi-node.md): FSDPP_SOCKET_IFNAME, the route to
// MASTER_ADDR, and the cases left to ProcessGroup. Checked against the kernel's own answers for
// the loopback interface, which every host has.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdio>
#include <map>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/gloo_address.h"

using namespace fsdpp;

namespace {

dist::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST(GlooAddress, InterfaceAddressOfLoopback) {
  std::string available;
  EXPECT_EQ(dist::interface_address("lo", &available), "127.0.0.1");
  EXPECT_NE(available.find("lo"), std::string::npos) << available;
  EXPECT_EQ(dist::interface_address("fsdpp-no-such0"), "");
}

TEST(GlooAddress, RouteToAnAddressLeavesFromTheInterfaceThatReachesIt) {
  EXPECT_EQ(dist::route_source_address("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(dist::route_source_address("127.3.4.5"), "127.0.0.1");
  std::string why;
  EXPECT_EQ(dist::route_source_address("fsdpp-no-such-host.invalid", &why), "");
  EXPECT_NE(why.find("cannot resolve 'fsdpp-no-such-host.invalid'"), std::string::npos) << why;
}

TEST(GlooAddress, ChoiceOrder) {
  // GLOO_SOCKET_IFNAME: ProcessGroup hands it to Gloo itself.
  EXPECT_EQ(dist::gloo_bind_address("10.1.2.3", env_of({{"GLOO_SOCKET_IFNAME", "lo"},
                                                         {"FSDPP_SOCKET_IFNAME", "lo"}})),
            "");
  // FSDPP_SOCKET_IFNAME: that interface's address, whatever MASTER_ADDR is.
  EXPECT_EQ(dist::gloo_bind_address("10.1.2.3", env_of({{"FSDPP_SOCKET_IFNAME", "lo"}})),
            "127.0.0.1");
  // A loopback MASTER_ADDR: ProcessGroup binds 127.0.0.1.
  EXPECT_EQ(dist::gloo_bind_address("127.0.0.1", env_of({})), "");
  EXPECT_EQ(dist::gloo_bind_address("localhost", env_of({})), "");
}

// Otherwise the address the route to MASTER_ADDR leaves from: for each of this host's own
// non-loopback IPv4 addresses, that address itself. (tests/multinode/ checks a route between
// two hosts.)
TEST(GlooAddress, RouteSourceForThisHostsOwnAddresses) {
  ifaddrs* list = nullptr;
  ASSERT_EQ(::getifaddrs(&list), 0);
  int checked = 0;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    EXPECT_EQ(dist::gloo_bind_address(buf, env_of({})), buf) << i->ifa_name;
    ++checked;
  }
  ::freeifaddrs(list);
  std::printf("[gloo-address] checked %d non-loopback address(es)\n", checked);
}

TEST(GlooAddress, UnknownInterfaceIsNamedWithTheOnesThereAre) {
  try {
    dist::gloo_bind_address("10.1.2.3", env_of({{"FSDPP_SOCKET_IFNAME", "fsdpp-nope0"}}));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[dist] FSDPP_SOCKET_IFNAME=fsdpp-nope0: no such interface"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("lo"), std::string::npos) << what;
  }
}

TEST(GlooAddress, UnresolvableMasterAddrIsACommError) {
  try {
    dist::gloo_bind_address("fsdpp-no-such-host.invalid", env_of({}));
    FAIL() << "no error";
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no route from this host to MASTER_ADDR=fsdpp-no-such-host.invalid"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("FSDPP_SOCKET_IFNAME"), std::string::npos) << what;
  }
}
