#include "fsdpp/common/launch_env.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/common/host_address.h"
#include "fsdpp/common/hostlist.h"
#include "fsdpp/common/whole_number.h"

namespace fsdpp {
namespace {

constexpr int kMaxWorld = 1 << 20;
constexpr int kDefaultPort = 29500;  // torchrun's, for a world of one

// The environment with typed readers whose errors name the variable, its value and what is
// accepted.
class Vars {
 public:
  Vars(const EnvLookup& env, std::string_view component) : env_(env), component_(component) {}

  std::optional<std::string> get(std::string_view name) const { return env_(name); }
  bool has(std::string_view name) const { return env_(name).has_value(); }

  std::optional<int> integer(std::string_view name, long long lo, long long hi,
                             std::string_view accepted) const {
    const auto text = env_(name);
    if (!text) return std::nullopt;
    const auto v = parse_whole_number(*text);
    FSDPP_CHECK_AS(ConfigError, v.has_value(),
                   "[{}] environment variable {}='{}' is not an integer; expected {}", component_,
                   name, *text, accepted);
    FSDPP_CHECK_AS(ConfigError, *v >= lo && *v <= hi,
                   "[{}] environment variable {}={} is out of range; expected {}", component_, name,
                   *text, accepted);
    return static_cast<int>(*v);
  }
  int required(std::string_view name, long long lo, long long hi, std::string_view accepted,
               std::string_view why) const {
    const auto v = integer(name, lo, hi, accepted);
    FSDPP_CHECK_AS(ConfigError, v.has_value(), "[{}] {} is not set; {}", component_, name, why);
    return *v;
  }
  std::string_view component() const { return component_; }

 private:
  const EnvLookup& env_;
  std::string_view component_;
};

// ---- one entry per environment ----------------------------------------------------------------

// What an environment says of a worker; unset addr/port: it does not know them.
struct ProcessReading {
  std::string detail;
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string rank_from, world_from;
  std::optional<Sourced<std::string>> addr;
  std::optional<Sourced<int>> port;
};

struct ProcessEnvironment {
  const char* name;
  // Its variables are set: this environment started the process.
  bool (*present)(const Vars&);
  ProcessReading (*read)(const Vars&);
  // It sets RANK/WORLD_SIZE itself (a launcher, or Kubeflow): they are its, not set by hand.
  bool owns_torchrun_variables;
};

std::string slurm_unused(const Vars& v);

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE as torchrun (and fsdpp-run) set them.
ProcessReading read_torchrun_variables(const Vars& v) {
  const auto rank = v.get("RANK");
  const auto world = v.get("WORLD_SIZE");
  const auto slurm = slurm_unused(v);
  FSDPP_CHECK_AS(ConfigError, rank && world,
                 "[{}] {} is set but {} is not; set both (fsdpp-run does) or neither{}", v.component(),
                 rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK",
                 slurm.empty() ? "" : ". " + slurm);
  ProcessReading r;
  r.world = *v.integer("WORLD_SIZE", 1, kMaxWorld, "a positive integer");
  r.rank = *v.integer("RANK", 0, r.world - 1, fmt::format("0 <= RANK < WORLD_SIZE={}", r.world));
  r.rank_from = "RANK";
  r.world_from = "WORLD_SIZE";
  r.local_world = v.integer("LOCAL_WORLD_SIZE", 1, r.world,
                            fmt::format("1 <= LOCAL_WORLD_SIZE <= WORLD_SIZE={}", r.world))
                      .value_or(r.world);
  r.local_rank = v.integer("LOCAL_RANK", 0, r.local_world - 1,
                           fmt::format("0 <= LOCAL_RANK < LOCAL_WORLD_SIZE={}", r.local_world))
                     .value_or(r.rank % r.local_world);
  return r;
}

// RANK and WORLD_SIZE exported by hand, the process started without a launcher. Which ranks share
// this host is known only when the job is this host's alone (MASTER_ADDR unset or this host's):
// then LOCAL_RANK/LOCAL_WORLD_SIZE default to RANK/WORLD_SIZE and the detection line says so. A
// job whose store is on another host spans nodes: LOCAL_* must be given (else rank 4 of 8 would
// take GPU 4 of a 4-GPU node and HYBRID_SHARD would see one node of 8).
ProcessReading read_by_hand(const Vars& v) {
  ProcessReading r = read_torchrun_variables(v);
  if (r.world == 1 || v.has("LOCAL_WORLD_SIZE")) return r;
  const auto addr = v.get("MASTER_ADDR");
  // Digits and dots that are no IPv4 address (256.1.1.1) name no host at all: the store's
  // connection refuses it with its own message (dist/world.cpp), not this one.
  in_addr unused{};
  if (addr && !addr->empty() && addr->find_first_not_of("0123456789.") == std::string::npos &&
      inet_pton(AF_INET, addr->c_str(), &unused) != 1) {
    return r;
  }
  FSDPP_CHECK_AS(ConfigError, !addr || addr->empty() || names_this_host(*addr),
                 "[{}] RANK={} and WORLD_SIZE={} were set by hand with MASTER_ADDR={}, another host: the "
                 "job spans nodes, and nothing says which of its ranks run on this one; set "
                 "LOCAL_RANK and LOCAL_WORLD_SIZE for every process (e.g. LOCAL_RANK=0 "
                 "LOCAL_WORLD_SIZE=4 on a 4-GPU node), or start each node's processes with fsdpp-run "
                 "--nproc-per-node N, which reads RANK as the node's first rank (docs/multi-node.md)",
                 v.component(), r.rank, r.world, *addr);
  r.detail = fmt::format("LOCAL_RANK={} LOCAL_WORLD_SIZE={} derived: {}", r.local_rank, r.local_world,
                         addr && !addr->empty() ? "MASTER_ADDR=" + *addr + " is this host, so every rank runs here"
                                                : "MASTER_ADDR unset, so every rank runs on this host");
  return r;
}

ProcessReading read_fsdpp_run(const Vars& v) {
  ProcessReading r = read_torchrun_variables(v);
  if (auto k = v.get("FSDPP_RESTART_COUNT"); k && *k != "0") r.detail = "restart " + *k;
  return r;
}

ProcessReading read_torchrun(const Vars& v) {
  ProcessReading r = read_torchrun_variables(v);
  r.detail = "run id " + v.get("TORCHELASTIC_RUN_ID").value_or("?");
  return r;
}

// Kubeflow's PyTorchJob sets RANK to the pod's index and WORLD_SIZE to pods x nprocPerNode;
// started without a launcher, a pod is one process, which is right only with one per pod.
ProcessReading read_kubeflow(const Vars& v) {
  const int nproc = v.integer("PET_NPROC_PER_NODE", 1, 1 << 16, "a positive integer").value_or(1);
  FSDPP_CHECK_AS(ConfigError, nproc == 1,
                 "[{}] this Kubeflow pod asks for PET_NPROC_PER_NODE={} processes, but it was started "
                 "without a launcher and is one process; make fsdpp-run the container's command "
                 "(docs/kubernetes.md), which starts them", v.component(), nproc);
  ProcessReading r = read_torchrun_variables(v);
  r.local_rank = 0;
  r.local_world = 1;
  if (auto nodes = v.get("PET_NNODES")) r.detail = "PET_NNODES=" + *nodes;
  return r;
}

ProcessReading read_open_mpi(const Vars& v) {
  ProcessReading r;
  r.world = *v.integer("OMPI_COMM_WORLD_SIZE", 1, kMaxWorld, "a positive integer");
  r.rank = v.required("OMPI_COMM_WORLD_RANK", 0, r.world - 1,
                      fmt::format("0 <= rank < OMPI_COMM_WORLD_SIZE={}", r.world),
                      "Open MPI sets it for every process mpirun starts");
  r.local_world = v.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, r.world, "1 <= local size <= world size")
                      .value_or(r.world);
  r.local_rank = v.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0, r.local_world - 1,
                           "0 <= local rank < OMPI_COMM_WORLD_LOCAL_SIZE")
                     .value_or(r.rank % r.local_world);
  r.rank_from = "OMPI_COMM_WORLD_RANK";
  r.world_from = "OMPI_COMM_WORLD_SIZE";
  if (auto job = v.get("OMPI_MCA_ess_base_jobid")) {
    r.detail = "job " + *job;
    r.port = Sourced<int>{port_from_job_id(*job, "OMPI_MCA_ess_base_jobid"),
                          "port from OMPI_MCA_ess_base_jobid=" + *job};
  }
  return r;
}

ProcessReading read_slurm(const Vars& v);
bool slurm_step(const Vars& v);

// MPICH's Hydra (mpiexec), Intel MPI, and SLURM's srun --mpi=pmi2.
ProcessReading read_pmi(const Vars& v) {
  ProcessReading r;
  r.world = v.required("PMI_SIZE", 1, kMaxWorld, "a positive integer", "PMI sets it with PMI_RANK");
  r.rank = *v.integer("PMI_RANK", 0, r.world - 1, fmt::format("0 <= rank < PMI_SIZE={}", r.world));
  r.local_world = v.integer("MPI_LOCALNRANKS", 1, r.world, "1 <= local size <= PMI_SIZE").value_or(r.world);
  r.local_rank = v.integer("MPI_LOCALRANKID", 0, r.local_world - 1, "0 <= local rank < MPI_LOCALNRANKS")
                     .value_or(r.rank % r.local_world);
  r.rank_from = "PMI_RANK";
  r.world_from = "PMI_SIZE";
  if (!v.has("MPI_LOCALNRANKS") && v.has("SLURM_PROCID") && slurm_step(v)) {
    // srun --mpi=pmi2 sets no local size: srun's own says it.
    const ProcessReading s = read_slurm(v);
    r.local_rank = s.local_rank;
    r.local_world = s.local_world;
  }
  return r;
}

// SLURM_TASKS_PER_NODE's form: "2(x3),1" is 2, 2, 2, 1 tasks on nodes 0-3.
std::optional<int> tasks_on_node(const std::string& list, int node) {
  int index = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t paren = item.find("(x");
    const auto count = parse_whole_number(item.substr(0, paren));
    auto repeat = paren == std::string::npos
                      ? std::optional<int64_t>(1)
                      : parse_whole_number(item.substr(paren + 2, item.size() - paren - 3));
    if (!count || !repeat || (paren != std::string::npos && item.back() != ')')) return std::nullopt;
    if (node < index + *repeat) return static_cast<int>(*count);
    index += static_cast<int>(*repeat);
  }
  return std::nullopt;
}

std::optional<Sourced<std::string>> slurm_first_host(const Vars& v) {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (auto list = v.get(name)) {
      return Sourced<std::string>{first_host(*list), fmt::format("first host of {}={}", name, *list)};
    }
  }
  return std::nullopt;
}

std::optional<Sourced<int>> slurm_port(const Vars& v) {
  for (const char* name : {"SLURM_JOB_ID", "SLURM_JOBID"}) {
    if (auto id = v.get(name)) {
      return Sourced<int>{port_from_job_id(*id, name), fmt::format("port from {}={}", name, *id)};
    }
  }
  return std::nullopt;
}

// A task that srun started (SLURM_STEP_ID is set in srun's tasks, not in the batch script).
bool slurm_step(const Vars& v) { return v.has("SLURM_STEP_ID") || v.has("SLURM_STEPID"); }

// SLURM's task variables without srun's step id: an sbatch script running the program without
// srun (they describe the allocation there, and the program is one process), or the variables set
// by hand without SLURM_STEP_ID. Empty when that is not the case.
std::string slurm_unused(const Vars& v) {
  if (slurm_step(v) || !(v.has("SLURM_PROCID") || v.has("SLURM_NTASKS"))) return "";
  return fmt::format(
      "SLURM_PROCID={} and SLURM_NTASKS={} were not used: SLURM_STEP_ID is not set, which srun sets "
      "in every task it starts; without it they describe an sbatch script's allocation, not a "
      "task. Start each rank with srun (docs/slurm.md), or set SLURM_STEP_ID with them",
      v.get("SLURM_PROCID").value_or("(unset)"), v.get("SLURM_NTASKS").value_or("(unset)"));
}

std::string slurm_detail(const Vars& v) {
  return fmt::format("job {}, step {}", v.get("SLURM_JOB_ID").value_or("?"),
                     v.get("SLURM_STEP_ID").value_or(v.get("SLURM_STEPID").value_or("?")));
}

ProcessReading read_slurm(const Vars& v) {
  ProcessReading r;
  r.detail = slurm_detail(v);
  r.world = v.required("SLURM_NTASKS", 1, kMaxWorld, "a positive integer",
                       "srun sets it with SLURM_PROCID (srun -n N)");
  r.rank = *v.integer("SLURM_PROCID", 0, r.world - 1, fmt::format("0 <= rank < SLURM_NTASKS={}", r.world));
  r.rank_from = "SLURM_PROCID";
  r.world_from = "SLURM_NTASKS";
  r.local_world = r.world;
  if (auto n = v.integer("SLURM_NTASKS_PER_NODE", 1, r.world, "1 <= tasks per node <= SLURM_NTASKS")) {
    r.local_world = *n;
  } else {
    const int node = v.integer("SLURM_NODEID", 0, kMaxWorld, "a node index").value_or(0);
    for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      if (auto list = v.get(name)) {
        const auto n = tasks_on_node(*list, node);
        FSDPP_CHECK_AS(ConfigError, n && *n >= 1 && *n <= r.world,
                       "[{}] environment variable {}='{}' has no task count for SLURM_NODEID={}; expected "
                       "SLURM's form such as 4(x2),1",
                       v.component(), name, *list, node);
        r.local_world = *n;
        break;
      }
    }
  }
  r.local_rank = v.integer("SLURM_LOCALID", 0, r.local_world - 1,
                           fmt::format("0 <= SLURM_LOCALID < tasks on this node = {}", r.local_world))
                     .value_or(r.rank % r.local_world);
  r.addr = slurm_first_host(v);
  r.port = slurm_port(v);
  return r;
}

bool has_kubeflow(const Vars& v) {
  return v.has("PET_NNODES") || v.has("PET_NODE_RANK") || v.has("PET_NPROC_PER_NODE");
}

// Innermost first: a launcher started by another (fsdpp-run under srun, mpirun inside an sbatch
// script) is the one that placed this process, and the outer one's variables describe the
// launcher, not the worker.
const ProcessEnvironment kProcessEnvironments[] = {
    {"fsdpp-run", [](const Vars& v) { return v.get("FSDPP_LAUNCHER") == "fsdpp-run"; },
     read_fsdpp_run, true},
    {"torchrun", [](const Vars& v) { return v.has("TORCHELASTIC_RUN_ID"); }, read_torchrun, true},
    {"Open MPI", [](const Vars& v) { return v.has("OMPI_COMM_WORLD_RANK") || v.has("OMPI_COMM_WORLD_SIZE"); },
     read_open_mpi, false},
    {"MPI (PMI)", [](const Vars& v) { return v.has("PMI_RANK"); }, read_pmi, false},
    {"SLURM srun", [](const Vars& v) { return v.has("SLURM_PROCID") && slurm_step(v); }, read_slurm, false},
    {"Kubeflow PyTorchJob", [](const Vars& v) { return has_kubeflow(v) && v.has("RANK"); }, read_kubeflow, true},
    {"RANK/WORLD_SIZE", [](const Vars& v) { return v.has("RANK") || v.has("WORLD_SIZE"); },
     read_by_hand, true},
};

// RANK, WORLD_SIZE and LOCAL_RANK set by hand (an sbatch script's `export RANK=0`) while another
// environment placed the process must say the same.
void check_torchrun_variables_agree(const Vars& v, const char* name, const ProcessReading& r) {
  const struct {
    const char* var;
    int value;
    std::string from;
  } checks[] = {{"RANK", r.rank, r.rank_from}, {"WORLD_SIZE", r.world, r.world_from},
                {"LOCAL_RANK", r.local_rank, "its local rank"}};
  for (const auto& c : checks) {
    const auto text = v.get(c.var);
    if (!text) continue;
    const auto value = parse_whole_number(*text);
    FSDPP_CHECK_AS(ConfigError, value && *value == c.value,
                   "[{}] environment variable {}={} contradicts {}={} ({}): this process was started "
                   "by {}, and {} was set by something else (an exported variable in the job script?); "
                   "unset it, or make it agree",
                   v.component(), c.var, *text, c.from, c.value, name, name, c.var);
  }
}

// Kubeflow Trainer's torch runtime and torchrun-style job scripts set only the PET_* variables and
// expect a launcher: without one this would silently be a job of one process.
void check_no_launcher_expected(const Vars& v) {
  const int nnodes = v.integer("PET_NNODES", 1, kMaxWorld, "a positive integer (elastic ranges such as "
                                                            "1:4 are not supported)").value_or(1);
  const int nproc = v.integer("PET_NPROC_PER_NODE", 1, 1 << 16, "a positive integer").value_or(1);
  FSDPP_CHECK_AS(ConfigError, nnodes * nproc == 1,
                 "[{}] PET_NNODES={} and PET_NPROC_PER_NODE={} (Kubeflow) ask for {} processes, but no "
                 "launcher started this one; make fsdpp-run the container's command (docs/kubernetes.md)",
                 v.component(), nnodes, nproc, nnodes * nproc);
}

Sourced<std::string> resolve_addr(const Vars& v, const ProcessReading& r, const char* name,
                                  bool torchrun_family) {
  if (auto a = v.get("MASTER_ADDR")) {
    FSDPP_CHECK_AS(ConfigError, !a->empty(),
                   "[{}] environment variable MASTER_ADDR is empty; expected a host name or IP",
                   v.component());
    return {*a, "MASTER_ADDR"};
  }
  if (r.addr) return *r.addr;
  // An MPI started by srun (--mpi=pmi2): rank 0 runs on the step's first node.
  if (!torchrun_family && slurm_step(v)) {
    if (auto a = slurm_first_host(v)) return *a;
  }
  if (r.local_world == r.world) return {"127.0.0.1", "every rank on this node"};
  if (torchrun_family) return {"127.0.0.1", "MASTER_ADDR unset"};
  FSDPP_THROW(ConfigError,
              "[{}] MASTER_ADDR is not set, and {} does not say which host runs rank 0 of this job on "
              "{} nodes; set it to that host for every rank (mpirun -x MASTER_ADDR=<host>; "
              "docs/mpi.md)",
              v.component(), name, r.world / r.local_world);
}

Sourced<int> resolve_port(const Vars& v, const ProcessReading& r, const char* name) {
  if (auto p = v.integer("MASTER_PORT", 1, 65535, "a TCP port in [1, 65535]")) return {*p, "MASTER_PORT"};
  if (r.port) return *r.port;
  if (slurm_step(v)) {
    if (auto p = slurm_port(v)) return *p;
  }
  FSDPP_CHECK_AS(ConfigError, r.world == 1,
                 "[{}] MASTER_PORT is not set but WORLD_SIZE={}; every rank needs the same MASTER_ADDR "
                 "and MASTER_PORT ({} gives no job id to derive one from; fsdpp-run sets them)",
                 v.component(), r.world, name);
  return {kDefaultPort, "default"};
}

std::string store_text(const Sourced<std::string>& addr, const Sourced<int>& port) {
  return fmt::format("store at {}:{} ({}; {})", addr.value, port.value, addr.from, port.from);
}

std::string title(const std::string& environment, const std::string& detail) {
  return detail.empty() ? environment : fmt::format("{} ({})", environment, detail);
}

}  // namespace

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

int port_from_job_id(std::string_view job_id, std::string_view variable) {
  const auto id = parse_whole_number(job_id);
  FSDPP_CHECK_AS(ConfigError, id && *id >= 0,
                 "[launch] environment variable {}='{}' is not a job number; set MASTER_PORT instead",
                 variable, job_id);
  return static_cast<int>(15000 + *id % 10000);
}

std::string ProcessPlacement::describe() const {
  return fmt::format("{}: rank {} of {}, local rank {} of {}, {}", title(environment, detail), rank,
                     world_size, local_rank, local_world_size, store_text(master_addr, master_port));
}

std::optional<ProcessPlacement> detect_process(const EnvLookup& env, std::string_view component) {
  const Vars v(env, component);
  for (const ProcessEnvironment& e : kProcessEnvironments) {
    if (!e.present(v)) continue;
    const ProcessReading r = e.read(v);
    if (!e.owns_torchrun_variables) check_torchrun_variables_agree(v, e.name, r);
    const bool torchrun_family = e.owns_torchrun_variables;
    ProcessPlacement p;
    p.environment = e.name;
    p.detail = r.detail;
    p.rank = r.rank;
    p.world_size = r.world;
    p.local_rank = r.local_rank;
    p.local_world_size = r.local_world;
    p.master_addr = resolve_addr(v, r, e.name, torchrun_family);
    p.master_port = resolve_port(v, r, e.name);
    return p;
  }
  check_no_launcher_expected(v);
  return std::nullopt;
}

std::string unused_launcher_variables(const EnvLookup& env) {
  return slurm_unused(Vars(env, "dist"));
}

// ---- a node's launcher ------------------------------------------------------------------------

namespace {

struct NodeEnvironment {
  const char* name;
  bool (*present)(const Vars&);
  // flags: what fsdpp-run's own flags say (--nproc-per-node, for RANK set by hand).
  NodePlacement (*read)(const Vars&, const NodePlacement& flags);
};

NodePlacement read_slurm_node(const Vars& v, const NodePlacement&) {
  NodePlacement n;
  n.environment = "SLURM srun";
  n.detail = slurm_detail(v);
  const char* nodes_var = v.has("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  const int nodes = v.required(nodes_var, 1, kMaxWorld, "a positive integer", "srun sets it");
  const char* tasks_var = v.has("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  const int tasks = v.integer(tasks_var, 1, kMaxWorld, "a positive integer").value_or(nodes);
  FSDPP_CHECK_AS(ConfigError, tasks == nodes,
                 "[{}] srun started {}={} tasks on {}={} nodes, but fsdpp-run runs once per node and "
                 "starts --nproc-per-node workers itself; use srun --ntasks-per-node=1 (docs/slurm.md)",
                 v.component(), tasks_var, tasks, nodes_var, nodes);
  n.nnodes = Sourced<int>{nodes, nodes_var};
  n.node_rank = Sourced<int>{v.required("SLURM_NODEID", 0, nodes - 1,
                                        fmt::format("0 <= SLURM_NODEID < {}", nodes), "srun sets it"),
                             "SLURM_NODEID"};
  n.master_addr = slurm_first_host(v);
  n.master_port = slurm_port(v);
  return n;
}

// Kubeflow's PyTorchJob and Trainer set torchrun's PET_* variables (torchrun reads --flag from
// PET_FLAG); older PyTorchJobs only the pod's RANK (its node rank) and WORLD_SIZE (the pods).
NodePlacement read_kubeflow_node(const Vars& v, const NodePlacement&) {
  NodePlacement n;
  n.environment = "Kubeflow";
  const char* elastic = "a positive integer (elastic ranges such as 1:4 are not supported)";
  if (auto k = v.integer("PET_NNODES", 1, kMaxWorld, elastic)) {
    n.nnodes = Sourced<int>{*k, "PET_NNODES"};
  } else if (auto w = v.integer("WORLD_SIZE", 1, kMaxWorld, "a positive integer");
             w && !v.has("PET_NPROC_PER_NODE")) {
    n.nnodes = Sourced<int>{*w, "WORLD_SIZE (PyTorchJob: the pods)"};
  }
  const long long max_rank = n.nnodes ? n.nnodes->value - 1 : kMaxWorld;
  const std::string accepted = fmt::format("0 <= node rank <= {}", max_rank);
  if (auto r = v.integer("PET_NODE_RANK", 0, max_rank, accepted)) {
    n.node_rank = Sourced<int>{*r, "PET_NODE_RANK"};
  } else if (auto r2 = v.integer("RANK", 0, max_rank, accepted)) {
    n.node_rank = Sourced<int>{*r2, "RANK (PyTorchJob: the pod's index)"};
  }
  const auto nproc_text = v.get("PET_NPROC_PER_NODE");
  FSDPP_CHECK_AS(ConfigError, !nproc_text || (*nproc_text != "auto" && *nproc_text != "gpu"),
                 "[{}] PET_NPROC_PER_NODE={} is not supported; give the number of workers per pod "
                 "(nprocPerNode: \"8\")", v.component(), nproc_text.value_or(""));
  if (auto p = v.integer("PET_NPROC_PER_NODE", 1, 1 << 16, "a positive integer")) {
    n.nproc_per_node = Sourced<int>{*p, "PET_NPROC_PER_NODE"};
  }
  for (const char* name : {"PET_MASTER_ADDR", "MASTER_ADDR"}) {
    if (auto a = v.get(name); a && !a->empty()) {
      n.master_addr = Sourced<std::string>{*a, name};
      break;
    }
  }
  for (const char* name : {"PET_MASTER_PORT", "MASTER_PORT"}) {
    if (auto p = v.integer(name, 1, 65535, "a TCP port in [1, 65535]")) {
      n.master_port = Sourced<int>{*p, name};
      break;
    }
  }
  return n;
}

// mpirun starting one fsdpp-run per node (--map-by ppr:1:node): the MPI rank is the node's.
NodePlacement read_open_mpi_node(const Vars& v, const NodePlacement&) {
  NodePlacement n;
  n.environment = "Open MPI";
  const int size = *v.integer("OMPI_COMM_WORLD_SIZE", 1, kMaxWorld, "a positive integer");
  const int local = v.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, size, "1 <= local size <= world size").value_or(1);
  FSDPP_CHECK_AS(ConfigError, local == 1,
                 "[{}] mpirun started OMPI_COMM_WORLD_LOCAL_SIZE={} launchers on this node, but fsdpp-run runs once "
                 "per node and starts --nproc-per-node workers itself; use mpirun --map-by ppr:1:node "
                 "(docs/mpi.md)", v.component(), local);
  n.nnodes = Sourced<int>{size, "OMPI_COMM_WORLD_SIZE"};
  n.node_rank = Sourced<int>{*v.integer("OMPI_COMM_WORLD_RANK", 0, size - 1, "0 <= rank < OMPI_COMM_WORLD_SIZE"),
                             "OMPI_COMM_WORLD_RANK"};
  if (auto a = v.get("MASTER_ADDR"); a && !a->empty()) n.master_addr = Sourced<std::string>{*a, "MASTER_ADDR"};
  if (auto p = v.integer("MASTER_PORT", 1, 65535, "a TCP port in [1, 65535]")) {
    n.master_port = Sourced<int>{*p, "MASTER_PORT"};
  } else if (auto job = v.get("OMPI_MCA_ess_base_jobid")) {
    n.master_port = Sourced<int>{port_from_job_id(*job, "OMPI_MCA_ess_base_jobid"),
                                 "port from OMPI_MCA_ess_base_jobid=" + *job};
  }
  return n;
}

// RANK and WORLD_SIZE exported by hand on each node, as the seeds write a two-node job (RANK=0 on
// node 0, RANK=4 on node 1, WORLD_SIZE=8, MASTER_ADDR the first node): RANK is the node's first
// rank, so with --nproc-per-node 4 this is node RANK / 4 of WORLD_SIZE / 4.
NodePlacement read_by_hand_node(const Vars& v, const NodePlacement& flags) {
  NodePlacement n;
  n.environment = "RANK/WORLD_SIZE set by hand";
  const int world = v.required("WORLD_SIZE", 1, kMaxWorld, "a positive integer",
                               "set it with RANK (every node's workers together)");
  const int rank = v.required("RANK", 0, world - 1, fmt::format("0 <= RANK < WORLD_SIZE={}", world),
                              "set it with WORLD_SIZE (the node's first rank)");
  const int per = flags.nproc_per_node ? flags.nproc_per_node->value : 1;
  const std::string per_from = flags.nproc_per_node ? flags.nproc_per_node->from : "the default, 1";
  FSDPP_CHECK_AS(ConfigError, world % per == 0 && rank % per == 0,
                 "[{}] RANK={} and WORLD_SIZE={} were set by hand for fsdpp-run, which reads RANK as this "
                 "node's first rank and WORLD_SIZE as every node's workers: both must be multiples of the "
                 "workers per node ({} from {}); e.g. RANK=0 and RANK=4 with WORLD_SIZE=8 on two nodes of "
                 "--nproc-per-node 4 (or give --nnodes and --node-rank instead)",
                 v.component(), rank, world, per, per_from);
  n.nnodes = Sourced<int>{world / per, fmt::format("WORLD_SIZE={} / {} per node", world, per)};
  n.node_rank = Sourced<int>{rank / per, fmt::format("RANK={} / {} per node", rank, per)};
  n.detail = fmt::format("its workers get RANK {}-{} and LOCAL_RANK 0-{}", rank, rank + per - 1, per - 1);
  if (auto a = v.get("MASTER_ADDR"); a && !a->empty()) n.master_addr = Sourced<std::string>{*a, "MASTER_ADDR"};
  if (auto p = v.integer("MASTER_PORT", 1, 65535, "a TCP port in [1, 65535]")) {
    n.master_port = Sourced<int>{*p, "MASTER_PORT"};
  }
  return n;
}

bool kubeflow_node(const Vars& v) {
  return has_kubeflow(v) || v.has("PET_MASTER_ADDR") ||
         (v.has("KUBERNETES_SERVICE_HOST") && v.has("RANK") && v.has("WORLD_SIZE") && v.has("MASTER_ADDR"));
}

const NodeEnvironment kNodeEnvironments[] = {
    {"Open MPI", [](const Vars& v) { return v.has("OMPI_COMM_WORLD_RANK"); }, read_open_mpi_node},
    {"SLURM srun", [](const Vars& v) { return v.has("SLURM_NODEID") && slurm_step(v); }, read_slurm_node},
    {"Kubeflow", kubeflow_node, read_kubeflow_node},
    {"RANK/WORLD_SIZE set by hand",
     [](const Vars& v) {
       return (v.has("RANK") || v.has("WORLD_SIZE")) && !v.has("OMPI_COMM_WORLD_RANK") &&
              !(v.has("SLURM_NODEID") && slurm_step(v)) && !kubeflow_node(v) && !v.has("FSDPP_LAUNCHER") &&
              !v.has("TORCHELASTIC_RUN_ID");
     },
     read_by_hand_node},
};

// A count or index the environment states (how many nodes srun started, which one this is): a
// flag that says otherwise is a mistake in one of them.
template <typename T>
void merge_fact(std::optional<Sourced<T>>& into, const std::optional<Sourced<T>>& found, const char* what,
                const char* environment, std::string_view component) {
  if (!found) return;
  if (!into) {
    into = found;
    return;
  }
  FSDPP_CHECK_AS(ConfigError, into->value == found->value,
                 "[{}] {}: {} says {}, but {}={} ({}); they must agree (leave the flag out to take the "
                 "environment's; in an interactive srun shell, `env -u SLURM_NODEID fsdpp-run ...` ignores "
                 "SLURM's step)",
                 component, what, into->from, into->value, found->from, found->value, environment);
}

// The store's address is a choice (the first host, a port derived from the job id): a flag wins.
template <typename T>
void merge_default(std::optional<Sourced<T>>& into, const std::optional<Sourced<T>>& found) {
  if (!into && found) into = found;
}

template <typename T>
std::string origin(const std::optional<Sourced<T>>& v) {
  return v ? v->from : "default";
}

}  // namespace

std::string NodePlacement::describe() const {
  if (environment.empty()) return "";
  std::string out = fmt::format("{}: node {} of {} ({}, {})", title(environment, detail),
                                node_rank ? node_rank->value : 0, nnodes ? nnodes->value : 1,
                                origin(node_rank), origin(nnodes));
  if (nproc_per_node && !nproc_per_node->from.starts_with("--"))
    out += fmt::format(", {} worker(s) per node ({})", nproc_per_node->value, nproc_per_node->from);
  if (master_addr && master_port) {
    out += ", " + store_text(*master_addr, *master_port);
  } else if (master_addr) {
    out += fmt::format(", store host {} ({})", master_addr->value, master_addr->from);
  }
  return out;
}

NodePlacement detect_node(NodePlacement flags, const EnvLookup& env, std::string_view component) {
  const Vars v(env, component);
  for (const NodeEnvironment& e : kNodeEnvironments) {
    if (!e.present(v)) continue;
    const NodePlacement found = e.read(v, flags);
    merge_fact(flags.nnodes, found.nnodes, "the number of nodes", e.name, component);
    merge_fact(flags.node_rank, found.node_rank, "this node's rank", e.name, component);
    merge_fact(flags.nproc_per_node, found.nproc_per_node, "workers per node", e.name, component);
    merge_default(flags.master_addr, found.master_addr);
    merge_default(flags.master_port, found.master_port);
    if (flags.environment.empty()) {
      flags.environment = found.environment;
      flags.detail = found.detail;
    } else {
      flags.environment += " + " + found.environment;
    }
  }
  return flags;
}

}  // namespace fsdpp
