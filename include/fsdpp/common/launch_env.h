#pragma once
// Who started this process, read from its environment: one table of the launch environments fsdpp
// knows (docs/launcher.md#environments), for the two places that read it:
//
//   a worker (init_from_env):  its rank, world size, local rank and the job's store address, from
//     fsdpp-run or torchrun, Open MPI's mpirun, MPICH's mpiexec (PMI), SLURM's srun (one task per
//     GPU, no launcher), a Kubeflow PyTorchJob pod, or RANK/WORLD_SIZE set by hand;
//   a node's launcher (fsdpp-run):  --nnodes, --node-rank, --nproc-per-node and the store's
//     address not given as flags, from SLURM's srun (one fsdpp-run per node) or Kubeflow's
//     PyTorchJob / Trainer (the PET_* variables torchrun reads).
//
// Each reader says which environment it found in one line (describe()), and sources that
// contradict each other (RANK=0 set by hand in an srun task whose SLURM_PROCID is 1, --nnodes 2
// under an srun step of 4 nodes) are a ConfigError naming both. No LibTorch: fsdpp-run uses it.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace fsdpp {

// Reads one environment variable (std::getenv, or a map in tests).
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
EnvLookup process_environment();

// A value and where it came from ("SLURM_PROCID", "--node-rank", "first host of
// SLURM_STEP_NODELIST=gpu[01-04]").
template <typename T>
struct Sourced {
  T value{};
  std::string from;
};

// A worker's place in the job.
struct ProcessPlacement {
  std::string environment;  // "fsdpp-run", "torchrun", "SLURM srun", "Open MPI", ...
  std::string detail;       // "job 1234, step 0" (may be empty)
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  Sourced<std::string> master_addr;
  Sourced<int> master_port;
  // "SLURM srun (job 1234, step 0): rank 3 of 8 (SLURM_PROCID, SLURM_NTASKS), local 1 of 4, store
  // at gpu01:16234 (first host of SLURM_STEP_NODELIST=gpu[01-02]; port from SLURM_JOB_ID=1234)"
  std::string describe() const;
};

// `component` names the reader in messages ("dist"). Returns std::nullopt when no launcher's
// variables are set (a single process). Throws ConfigError naming the variable, its value and
// what is accepted, or the two sources that disagree.
std::optional<ProcessPlacement> detect_process(const EnvLookup& env, std::string_view component);
// When detect_process found no launcher but some launcher's variables are set, why they were not
// used: SLURM_PROCID/SLURM_NTASKS without SLURM_STEP_ID (srun sets it in each task; an sbatch
// script running a program without srun has the others). Empty when nothing needs saying.
std::string unused_launcher_variables(const EnvLookup& env);

// A node launcher's settings: what its flags gave, then what the environment filled in.
struct NodePlacement {
  std::string environment;  // empty: the flags alone
  std::string detail;
  std::optional<Sourced<int>> nnodes, node_rank, nproc_per_node;
  std::optional<Sourced<std::string>> master_addr;
  std::optional<Sourced<int>> master_port;
  // "SLURM srun (job 1234, step 0): node 1 of 2 (SLURM_NODEID, SLURM_STEP_NUM_NODES), store at
  // gpu01:16234 (...)"; empty when the environment added nothing.
  std::string describe() const;
};

// Fills what `flags` leaves unset from the environment; a flag that contradicts it is a
// ConfigError naming both ("--nnodes 2, but SLURM_STEP_NUM_NODES=4 (SLURM srun)").
NodePlacement detect_node(NodePlacement flags, const EnvLookup& env, std::string_view component);

// A port every process of a batch job derives alike from its job id: 15000 + id % 10000 (the
// last four digits, as PyTorch Lightning does), below Linux's ephemeral ports (32768-60999). Jobs
// whose ids end alike share it, which matters only when they share a node: set MASTER_PORT (or
// --master-port) for one that must not.
int port_from_job_id(std::string_view job_id, std::string_view variable);

}  // namespace fsdpp
