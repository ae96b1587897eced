// fsdpp-run's placement flags (its own and torchrun's spellings) over the environment that
// started it (launch_env.h): which node this is, of how many, and where the job's store is.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/common/whole_number.h"
#include "fsdpp/launch/launcher.h"

namespace fsdpp::launch {
namespace {

constexpr int kRdzvDefaultPort = 29400;  // torchrun's for --rdzv-endpoint without a port

template <typename T>
std::optional<Sourced<T>> given(const std::optional<T>& value, const char* flag) {
  if (!value) return std::nullopt;
  return Sourced<T>{*value, flag};
}

// --rdzv-endpoint HOST[:PORT] (an IPv6 address in brackets: [::1]:29400).
std::pair<std::string, int> parse_endpoint(const std::string& text) {
  std::string host = text;
  std::string port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close != std::string::npos) {
      host = text.substr(1, close - 1);
      if (close + 1 < text.size() && text[close + 1] == ':') port = text.substr(close + 2);
    }
  } else if (const auto colon = text.rfind(':'); colon != std::string::npos && text.find(':') == colon) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  const auto p = port.empty() ? std::optional<int64_t>(kRdzvDefaultPort) : parse_whole_number(port);
  if (host.empty() || !p || *p < 1 || *p > 65535) {
    throw UsageError(fmt::format("[fsdpp-run] --rdzv-endpoint expects HOST[:PORT] with a port in 1-65535, "
                                 "got '{}'", text));
  }
  return {host, static_cast<int>(*p)};
}

// --master-addr/--master-port and --rdzv-endpoint name the same store: both may be given only
// when they agree.
template <typename T>
void same(std::optional<Sourced<T>>& flag, const T& endpoint_value, const std::string& endpoint) {
  if (flag && flag->value != endpoint_value) {
    throw UsageError(fmt::format("[fsdpp-run] {} {} and --rdzv-endpoint {} name different stores; give one",
                                 flag->from, flag->value, endpoint));
  }
  flag = Sourced<T>{endpoint_value, "--rdzv-endpoint"};
}

// Why `host` does not resolve to an address ("" when it does).
std::string resolve_error(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  return rc == 0 ? "" : ::gai_strerror(rc);
}

}  // namespace

std::string apply_placement(const PlacementFlags& flags, const EnvLookup& env, LaunchConfig& config) {
  if (flags.rdzv_backend && *flags.rdzv_backend != "c10d" && *flags.rdzv_backend != "static") {
    throw UsageError(fmt::format("[fsdpp-run] --rdzv-backend {} is not supported; expected c10d (or static): "
                                 "node 0's launcher hosts a TCPStore at --rdzv-endpoint",
                                 *flags.rdzv_backend));
  }
  NodePlacement p;
  p.nnodes = given(flags.nnodes, "--nnodes");
  p.node_rank = given(flags.node_rank, "--node-rank");
  p.nproc_per_node = given(flags.nproc_per_node, "--nproc-per-node");
  p.master_addr = given(flags.master_addr, "--master-addr");
  p.master_port = given(flags.master_port, "--master-port");
  if (flags.rdzv_endpoint) {
    const auto [host, port] = parse_endpoint(*flags.rdzv_endpoint);
    same(p.master_addr, host, *flags.rdzv_endpoint);
    same(p.master_port, port, *flags.rdzv_endpoint);
  }
  if (flags.standalone) {
    if ((p.nnodes && p.nnodes->value != 1) || p.master_addr || p.master_port) {
      throw UsageError("[fsdpp-run] --standalone is one node on 127.0.0.1 with a free port; it takes no "
                       "--nnodes > 1, --master-addr, --master-port or --rdzv-endpoint");
    }
    p.nnodes = Sourced<int>{1, "--standalone"};
  } else {
    try {
      p = detect_node(std::move(p), env, "fsdpp-run");
    } catch (const ConfigError& e) {
      throw UsageError(e.what());
    }
  }
  if (p.nnodes) config.nnodes = p.nnodes->value;
  if (p.node_rank) config.node_rank = p.node_rank->value;
  if (p.nproc_per_node) config.nproc_per_node = p.nproc_per_node->value;
  // One node meets on 127.0.0.1 at a free port unless told otherwise: an address the environment
  // derived for a job of several nodes is not needed, and its port may be taken by another job.
  const auto from_flags = [](const auto& v) { return v && v->from.starts_with("--"); };
  std::vector<std::string> unused;
  if (p.master_addr && (config.nnodes > 1 || from_flags(p.master_addr))) {
    config.master_addr = p.master_addr->value;
  } else if (p.master_addr) {
    unused.push_back(fmt::format("{}={}", p.master_addr->from, p.master_addr->value));
    p.master_addr.reset();
  }
  if (p.master_port && (config.nnodes > 1 || from_flags(p.master_port))) {
    config.master_port = p.master_port->value;
  } else if (p.master_port) {
    unused.push_back(fmt::format("{}={}", p.master_port->from, p.master_port->value));
    p.master_port.reset();
  }
  if (flags.rdzv_id) config.rdzv_id = *flags.rdzv_id;
  // The line names the store the workers will use, never one they do not.
  std::string line = p.describe();
  if (!line.empty() && !unused.empty()) {
    line += fmt::format("; one node: its workers meet on 127.0.0.1 at a free port ({} not used)",
                        fmt::join(unused, ", "));
  }
  if (!line.empty() && config.nnodes > 1 && p.master_addr) {
    // Not an error: in a cluster the first node's name may resolve only once its pod is up, and
    // the rendezvous waits for it; but the line must not present a name that resolves to nothing
    // as a store.
    if (const std::string why = resolve_error(config.master_addr); !why.empty()) {
      line += fmt::format("; {} does not resolve yet ({}): waiting for it up to --rdzv-timeout-s",
                          config.master_addr, why);
    }
  }
  return line;
}

}  // namespace fsdpp::launch
