#include "fsdpp/dist/world.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include "fsdpp/common/error.h"
#include "fsdpp/common/launch_env.h"
#include "fsdpp/common/whole_number.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/dist/gloo_address.h"
#include "fsdpp/dist/trace.h"
#include "deadline_store.h"
#include "rendezvous_check.h"
#include "nccl_backend.h"
#include "stack_traces.h"

namespace fsdpp::dist {
namespace {

std::string first_line(const std::exception& e) {
  std::string why = e.what();
  if (auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
  return why;
}

BackendKind choose_backend(const InitOptions& options, c10::Device device) {
  if (options.backend) return *options.backend;
  if (const char* b = std::getenv("FSDPP_BACKEND"); b && *b) {
    std::string v = b;
    if (v == "gloo") return BackendKind::GLOO;
    if (v == "nccl") return BackendKind::NCCL;
    FSDPP_THROW(ConfigError, "[dist] FSDPP_BACKEND='{}' is not a backend; expected gloo or nccl", v);
  }
  return device.is_cuda() ? BackendKind::NCCL : BackendKind::GLOO;
}

void set_threads(const DistEnv& env, const InitOptions& options) {
  std::optional<int> n = options.num_threads;
  if (!n) {
    if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) {
      char* end = nullptr;
      long v = std::strtol(omp, &end, 10);
      FSDPP_CHECK_AS(ConfigError, end && *end == '\0' && v >= 1 && v <= 4096,
                     "[dist] OMP_NUM_THREADS='{}' is not a positive integer", omp);
      n = static_cast<int>(v);
    } else if (env.world_size > 1) {
      n = 1;
    }
  }
  if (n) torch::set_num_threads(*n);
}

// A MASTER_ADDR that names no host fails here at once, instead of as a rendezvous timeout that
// blames the port.
void check_resolves(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &res);
  if (res != nullptr) ::freeaddrinfo(res);
  FSDPP_CHECK_AS(ConfigError, rc == 0,
                 "[dist] MASTER_ADDR='{}' is not a usable address ({}); expected the host name or "
                 "IP address of the machine that runs rank 0",
                 addr, ::gai_strerror(rc));
}

// TCPStore's constructor talks to the server once connected; a server that accepts connections
// but is stopped would hold it forever, so it runs on a thread of its own with a deadline.
c10::intrusive_ptr<c10d::Store> connect_bounded(const std::string& addr,
                                                const c10d::TCPStoreOptions& so,
                                                std::chrono::milliseconds bound) {
  auto task = std::make_shared<std::packaged_task<c10::intrusive_ptr<c10d::Store>()>>(
      [addr, so]() -> c10::intrusive_ptr<c10d::Store> {
        return c10::make_intrusive<c10d::TCPStore>(addr, so);
      });
  auto result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (result.wait_for(bound) != std::future_status::ready) {
    FSDPP_THROW(TimeoutError,
                "[dist] the rendezvous store at {}:{} accepted no session within {} ms: its host "
                "(rank 0) is stopped, hung, or unreachable",
                addr, so.port, bound.count());
  }
  return result.get();
}

std::string host_name() {
  char h[256] = {};
  return ::gethostname(h, sizeof(h) - 1) == 0 ? std::string(h) : std::string("?");
}

// After rank 0 failed to host the store: what the rank 0 already hosting it recorded of itself
// (rendezvous_check.h), or nothing when no fsdpp job answers there within a few seconds.
std::optional<std::string> rank0_already_there(const DistEnv& env) {
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = std::chrono::seconds(3);
    auto store = connect_bounded(env.master_addr, so, std::chrono::seconds(5));
    // The other rank 0 may have started a moment ago: give it time to record itself.
    store->wait({"fsdpp/rdzv/who/0"}, std::chrono::seconds(2));
    return detail::recorded_rank(*store, 0);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

World::World(DistEnv env, c10::intrusive_ptr<c10d::Store> store, BackendKind backend)
    : env_(std::move(env)), store_(std::move(store)), backend_(backend) {
  if (backend_ == BackendKind::GLOO && env_.world_size > 1) {
    gloo_address_ = gloo_bind_address(env_.master_addr, [](std::string_view name) {
      const char* v = std::getenv(std::string(name).c_str());
      return v ? std::optional<std::string>(v) : std::nullopt;
    });
  }
  ProcessGroup::Options o;
  o.backend = backend_;
  o.timeout = env_.timeout;
  o.name = "default";
  o.master_addr = env_.master_addr;
  o.gloo_hostname = gloo_address_;
  const c10::Device d = device();
  o.device_index = d.is_cuda() ? d.index() : -1;
  group_ = ProcessGroup::create(store_, env_.rank, env_.world_size, o);
  trace_ = TraceRecorder::from_env(env_.rank);  // FSDPP_PROFILE_STEPS
  group_->set_trace(trace_);
  mesh_ = std::make_shared<DeviceMesh>(*this, std::vector<int>{env_.world_size},
                                       std::vector<std::string>{"shard"});
}

// FSDPP_DEVICE, else the LOCAL_RANK-th GPU when there are GPUs, else the CPU (device.h): read
// again on each call (an environment lookup), and checked once by init_world.
c10::Device World::device() const { return choose_device(std::nullopt, env_.rank, env_.local_rank); }

std::shared_ptr<ProcessGroup> World::new_group(const std::vector<int>& ranks,
                                               const std::string& name) {
  auto it = std::find(ranks.begin(), ranks.end(), env_.rank);
  for (int r : ranks) {
    FSDPP_CHECK(r >= 0 && r < env_.world_size, "[dist] new_group '{}': rank {} is not in [0, {})",
                name, r, env_.world_size);
  }
  if (it == ranks.end()) return nullptr;
  ProcessGroup::Options o;
  o.backend = backend_;
  o.timeout = env_.timeout;
  o.name = name;
  o.global_ranks = ranks;
  o.master_addr = env_.master_addr;
  o.gloo_hostname = gloo_address_;
  const c10::Device d = device();
  o.device_index = d.is_cuda() ? d.index() : -1;
  auto group = ProcessGroup::create(store_, static_cast<int>(it - ranks.begin()),
                                    static_cast<int>(ranks.size()), o);
  group->set_trace(trace_);
  made_groups_.push_back(group);
  return group;
}

void World::set_trace(std::shared_ptr<TraceRecorder> trace) {
  trace_ = std::move(trace);
  group_->set_trace(trace_);
  for (const auto& weak : made_groups_) {
    if (auto g = weak.lock()) g->set_trace(trace_);
  }
}

std::shared_ptr<DeviceMesh> World::init_device_mesh(std::vector<int> shape,
                                                    std::vector<std::string> dim_names) {
  return std::make_shared<DeviceMesh>(*this, std::move(shape), std::move(dim_names));
}

std::shared_ptr<World> init_world(const DistEnv& env_in, const c10::intrusive_ptr<c10d::Store>& store,
                                  const InitOptions& options) {
  DistEnv env = env_in;
  if (options.timeout) env.timeout = *options.timeout;
  // A rank whose LOCAL_RANK has no GPU is an error here, before anything connects.
  const c10::Device device = choose_device(std::nullopt, env.rank, env.local_rank);
  const BackendKind backend = choose_backend(options, device);
  set_threads(env, options);
  if (backend == BackendKind::NCCL) {
    FSDPP_CHECK_AS(ConfigError, cuda_available(),
                   "[dist] backend nccl needs CUDA devices and none is visible");
    FSDPP_CHECK_AS(ConfigError, device.is_cuda(),
                   "[dist] rank {}: backend nccl needs the rank on a GPU, but FSDPP_DEVICE puts it "
                   "on {}; use Gloo (FSDPP_BACKEND=gloo) on the CPU",
                   env.rank, device.str());
  }
  // Allocations that name no index ("cuda") and c10d's NCCL go to this rank's GPU.
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
  return std::make_shared<World>(env, store, backend);
}

std::shared_ptr<World> init_from_env(const InitOptions& options) {
  detail::hide_cpp_stack_traces_unless_asked();
  DistEnv env = DistEnv::from_env();
  if (options.timeout) env.timeout = *options.timeout;
  // One line on what placed the ranks (docs/launcher.md#environments), from rank 0; every rank
  // names itself so at the rendezvous.
  std::string placement;
  if (env.launched) {
    if (auto placed = detect_process(process_environment(), "dist")) {
      placement = placed->describe();
      if (env.rank == 0) fmt::print(stderr, "[dist] {}\n", placement);
    }
  } else if (const auto why = unused_launcher_variables(process_environment()); !why.empty()) {
    fmt::print(stderr, "[dist] one process: {}\n", why);
  }
  const std::string who = fmt::format("pid {} on host {}{}", ::getpid(), host_name(),
                                      placement.empty() ? "" : "; " + placement);
  c10::intrusive_ptr<c10d::Store> store;
  if (!env.launched || env.world_size == 1) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = env.rank == 0 && !env.agent_store;
    so.numWorkers = std::nullopt;
    so.waitWorkers = false;
    so.timeout = env.timeout;
    check_resolves(env.master_addr);
    try {
      if (so.isServer) {
        store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
      } else {
        // TCPStore retries a refused connection with back-off until its timeout, and its last
        // attempt may start just before that: its own error must win over this bound.
        store = connect_bounded(env.master_addr, so, 2 * env.timeout + std::chrono::seconds(5));
      }
    } catch (const TimeoutError&) {
      throw;
    } catch (const std::exception& e) {
      if (so.isServer) {
        // Who is there: a rank 0 of an fsdpp job says so on its store (two tasks both given
        // rank 0, or another job on this port), anything else is another program.
        if (const auto other = rank0_already_there(env)) {
          FSDPP_THROW(ConfigError,
                      "[dist] rank 0 cannot host the rendezvous store on {}:{} (MASTER_ADDR/"
                      "MASTER_PORT): rank 0 of an fsdpp job already hosts it there ({}), and this "
                      "process ({}) was started as rank 0 too. Two processes of one job were "
                      "given rank 0 (check how the tasks were started: RANK, OMPI_COMM_WORLD_RANK, "
                      "SLURM_PROCID, PMI_RANK), or another job uses this port (give each job its "
                      "own MASTER_PORT)",
                      env.master_addr, env.master_port, *other, who);
        }
        FSDPP_THROW(CommError,
                    "[dist] rank 0 cannot host the rendezvous store on {}:{} (MASTER_ADDR/"
                    "MASTER_PORT): {}; pick a free port (fsdpp-run does when --master-port is "
                    "not given)",
                    env.master_addr, env.master_port, first_line(e));
      }
      FSDPP_THROW(TimeoutError,
                  "[dist] rank {} could not reach the rendezvous store at {}:{} (MASTER_ADDR/"
                  "MASTER_PORT) within {} ms: {}; is rank 0 running, and is the address "
                  "reachable from this host?",
                  env.rank, env.master_addr, env.master_port, env.timeout.count(), first_line(e));
    }
    // Every later store call (group set-up, the hang detector, checkpoint agreement) is bounded.
    const std::string host =
        env.agent_store ? fmt::format("fsdpp-run's agent at {}:{}", env.master_addr, env.master_port)
                        : fmt::format("hosted by rank 0 at {}:{}", env.master_addr, env.master_port);
    store = c10::make_intrusive<detail::DeadlineStore>(std::move(store), host, env.timeout);
    // The agent's store outlives a restart of the workers (multi-node --max-restarts): each
    // attempt's keys get their own prefix, as torchrun's workers do.
    if (env.agent_store) {
      const char* attempt = std::getenv("FSDPP_RESTART_COUNT");
      const auto n = parse_whole_number(attempt != nullptr ? attempt : "0");
      FSDPP_CHECK_AS(ConfigError, n && *n >= 0,
                     "[dist] environment variable FSDPP_RESTART_COUNT='{}' is not a count of restarts", attempt);
      store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("/worker/attempt_{}", *n), std::move(store));
    }
    // One job: the same world size everywhere, one process per rank, everyone there.
    detail::meet_at_rendezvous(*store, {env.rank, env.world_size, who}, env.timeout);
  }
  return init_world(env, store, options);
}

}  // namespace fsdpp::dist
