#pragma once
// The distributed world a process belongs to: its environment, the rendezvous store, the
// default process group, and the meshes and groups made from it. There is no hidden global
// state: init_from_env() returns the World, and everything that communicates is given it (or a
// mesh made from it).

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
// world->store() is handed to users (RuntimeOptions::store, AsyncSaver): a complete type for them.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/dist/env.h"
#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist {

struct InitOptions {
  // Empty: FSDPP_BACKEND if set ("gloo" or "nccl"), else NCCL when the rank computes on a GPU
  // (device()), else Gloo.
  std::optional<BackendKind> backend;
  // Empty: FSDPP_TIMEOUT_S if set, else 300 s.
  std::optional<std::chrono::milliseconds> timeout;
  // Intra-op threads per rank: empty means OMP_NUM_THREADS if set, else 1 when there is more
  // than one rank (oversubscribed cores make every timing meaningless), else LibTorch's default.
  std::optional<int> num_threads;
};

class World {
 public:
  World(DistEnv env, c10::intrusive_ptr<c10d::Store> store, BackendKind backend);

  const DistEnv& env() const { return env_; }
  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  BackendKind backend() const { return backend_; }
  // Where this rank computes: FSDPP_DEVICE if set, else its LOCAL_RANK-th GPU when there are
  // GPUs, else the CPU (dist/device.h's choose_device; docs/gpus.md).
  c10::Device device() const;
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  // The 1-D mesh over all ranks (dim name "shard").
  const std::shared_ptr<DeviceMesh>& mesh() const { return mesh_; }
  // The local address this rank's Gloo groups bind and advertise: FSDPP_SOCKET_IFNAME's address,
  // else the one that routes to MASTER_ADDR; empty where ProcessGroup decides (loopback
  // MASTER_ADDR, GLOO_SOCKET_IFNAME, NCCL). docs/multi-node.md.
  const std::string& gloo_address() const { return gloo_address_; }

  // A new group over `ranks` (global ranks, in group order). Collective over its members only;
  // every member passes the same name. Returns nullptr on ranks that are not members.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name);
  // A mesh over all ranks; collective over the world.
  std::shared_ptr<DeviceMesh> init_device_mesh(std::vector<int> shape,
                                               std::vector<std::string> dim_names);

  // Used by DeviceMesh to name its groups uniquely.
  int next_mesh_id() { return mesh_count_++; }

  // This rank's timeline recorder (null: none). FSDPP_PROFILE_STEPS makes one when the World
  // is made; set_trace replaces it on the world's groups, those made so far and those to come
  // (docs/observability.md#timeline-traces). Call it before communicating.
  const std::shared_ptr<TraceRecorder>& trace() const { return trace_; }
  void set_trace(std::shared_ptr<TraceRecorder> trace);

 private:
  DistEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  BackendKind backend_;
  std::string gloo_address_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<DeviceMesh> mesh_;
  int mesh_count_ = 0;
  std::shared_ptr<TraceRecorder> trace_;
  std::vector<std::weak_ptr<ProcessGroup>> made_groups_;  // by new_group, for set_trace
};

// Reads the torchrun variables (see DistEnv), rendezvous through c10d's TCPStore (rank 0 hosts
// it unless a launcher does), and creates the default group. With no variables set it makes a
// world of one process.
std::shared_ptr<World> init_from_env(const InitOptions& options = {});

// The same from an explicit environment and store (tests run several ranks as threads over one
// HashStore).
std::shared_ptr<World> init_world(const DistEnv& env, const c10::intrusive_ptr<c10d::Store>& store,
                                  const InitOptions& options = {});

}  // namespace fsdpp::dist
