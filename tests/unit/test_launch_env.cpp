// The launch environments (fsdpp/common/launch_env.h) from their variables, as each launcher sets
// them: SLURM's srun (captured from a real srun on slurm-wlm 22.05, tests/launch/slurm_job.sh),
// Open MPI's mpirun (captured from Debian's openmpi-bin 4.1.4), MPICH's Hydra, Kubeflow's
// PyTorchJob (training-operator's envvar.go) and Trainer, torchrun and fsdpp-run.
#include <gtest/gtest.h>

#include <map>

#include "fsdpp/common/error.h"
#include "fsdpp/common/hostlist.h"
#include "fsdpp/common/launch_env.h"
#include "fsdpp/dist/env.h"

namespace {

using fsdpp::ConfigError;
using Vars = std::map<std::string, std::string>;

fsdpp::EnvLookup lookup(const Vars& vars) {
  return [vars](std::string_view k) -> std::optional<std::string> {
    auto it = vars.find(std::string(k));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::optional<fsdpp::ProcessPlacement> process(const Vars& vars) {
  return fsdpp::detect_process(lookup(vars), "dist");
}

std::string process_error(const Vars& vars) {
  try {
    process(vars);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Vars merged(Vars a, const Vars& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

// Task 3 of `srun -N 2 -n 4` in job 4242 on gpu[07-08] (block distribution: 2 per node).
const Vars kSrunTask = {
    {"SLURM_JOB_ID", "4242"},           {"SLURM_JOBID", "4242"},
    {"SLURM_STEP_ID", "0"},             {"SLURM_STEPID", "0"},
    {"SLURM_PROCID", "3"},              {"SLURM_LOCALID", "1"},
    {"SLURM_NODEID", "1"},              {"SLURM_NTASKS", "4"},
    {"SLURM_NPROCS", "4"},              {"SLURM_NNODES", "2"},
    {"SLURM_STEP_NUM_NODES", "2"},      {"SLURM_STEP_NUM_TASKS", "4"},
    {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_TASKS_PER_NODE", "2(x2)"},
    {"SLURM_STEP_NODELIST", "gpu[07-08]"},  {"SLURM_JOB_NODELIST", "gpu[07-08]"},
    {"SLURM_NODELIST", "gpu[07-08]"}};

// Rank 1 of `mpirun -np 2` (Open MPI 4.1.4 on one node), as captured here.
const Vars kOpenMpiRank = {{"OMPI_COMM_WORLD_RANK", "1"},       {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                           {"OMPI_COMM_WORLD_NODE_RANK", "1"},  {"OMPI_MCA_ess_base_jobid", "1168375809"},
                           {"OMPI_MCA_orte_num_nodes", "1"},    {"PMIX_RANK", "1"}};

TEST(Hostlist, ExpandsSlurmSyntax) {
  using V = std::vector<std::string>;
  EXPECT_EQ(fsdpp::expand_hostlist("gpu[01-04,07]"), (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  EXPECT_EQ(fsdpp::expand_hostlist("login1,gpu[9-11],x"), (V{"login1", "gpu9", "gpu10", "gpu11", "x"}));
  EXPECT_EQ(fsdpp::expand_hostlist("r[1-2]n[08-09]"), (V{"r1n08", "r1n09", "r2n08", "r2n09"}));
  EXPECT_EQ(fsdpp::expand_hostlist("vm"), (V{"vm"}));
  EXPECT_EQ(fsdpp::expand_hostlist("10.0.0.[1-3]"), (V{"10.0.0.1", "10.0.0.2", "10.0.0.3"}));
  EXPECT_EQ(fsdpp::first_host("gpu[07-08,11],login1"), "gpu07");
  EXPECT_EQ(fsdpp::first_host("a[3]b[010-012]"), "a3b010");
  EXPECT_EQ(fsdpp::first_host("node-[100000-999999]"), "node-100000");  // without expanding
}

TEST(Hostlist, RejectsMalformedLists) {
  for (const char* bad : {"gpu[01-04", "gpu01-04]", "gpu[4-1]", "gpu[a-b]", "gpu[[1]]", "", ","}) {
    EXPECT_THROW(fsdpp::expand_hostlist(bad), ConfigError) << bad;
  }
  try {
    fsdpp::expand_hostlist("gpu[4-1]");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'[4-1]' holds '4-1'"), std::string::npos) << e.what();
  }
}

TEST(LaunchEnv, NothingSetIsOneProcess) {
  EXPECT_FALSE(process({}).has_value());
  // An sbatch script itself has SLURM_PROCID=0 but no step: it is not a task srun started.
  EXPECT_FALSE(process({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).has_value());
}

TEST(LaunchEnv, SlurmTaskVariablesWithoutTheStepSayWhy) {
  // slurm.md's table set by hand, without SLURM_STEP_ID: one process, and a line saying why.
  const Vars table = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                      {"SLURM_JOB_ID", "7"}};
  EXPECT_FALSE(process(table).has_value());
  const auto why = fsdpp::unused_launcher_variables(lookup(table));
  EXPECT_NE(why.find("SLURM_PROCID=1 and SLURM_NTASKS=4 were not used: SLURM_STEP_ID is not set"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("srun"), std::string::npos) << why;
  // With the step id they place the process; nothing left unused.
  EXPECT_EQ(process(merged(table, {{"SLURM_STEP_ID", "0"}}))->environment, "SLURM srun");
  EXPECT_EQ(fsdpp::unused_launcher_variables(lookup(kSrunTask)), "");
  EXPECT_EQ(fsdpp::unused_launcher_variables(lookup({})), "");
  // RANK by hand beside them: the error says why SLURM's were not read either.
  const auto e = process_error(merged(table, {{"RANK", "1"}}));
  EXPECT_NE(e.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << e;
  EXPECT_NE(e.find("SLURM_STEP_ID is not set"), std::string::npos) << e;
}

TEST(LaunchEnv, SrunTaskPerRank) {
  const auto p = process(kSrunTask);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->environment, "SLURM srun");
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->local_rank, 1);
  EXPECT_EQ(p->local_world_size, 2);
  EXPECT_EQ(p->master_addr.value, "gpu07");
  EXPECT_EQ(p->master_port.value, 15000 + 4242);
  EXPECT_EQ(p->describe(),
            "SLURM srun (job 4242, step 0): rank 3 of 4, local rank 1 of 2, store at gpu07:19242 (first "
            "host of SLURM_STEP_NODELIST=gpu[07-08]; port from SLURM_JOB_ID=4242)");
}

TEST(LaunchEnv, SrunUnevenTasksPerNode) {
  // srun -n 5 on 2 nodes: 3 tasks on the first, 2 on the second; this is the second's.
  auto vars = merged(kSrunTask, {{"SLURM_NTASKS", "5"}, {"SLURM_PROCID", "4"}, {"SLURM_LOCALID", "1"},
                                 {"SLURM_STEP_TASKS_PER_NODE", "3,2"}});
  const auto p = process(vars);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_world_size, 2);
  EXPECT_EQ(process(merged(vars, {{"SLURM_NTASKS_PER_NODE", "3"}, {"SLURM_LOCALID", "2"}}))->local_world_size, 3);
  EXPECT_NE(process_error(merged(vars, {{"SLURM_STEP_TASKS_PER_NODE", "3(x"}}))
                .find("SLURM_STEP_TASKS_PER_NODE='3(x' has no task count for SLURM_NODEID=1"),
            std::string::npos);
}

TEST(LaunchEnv, MasterVariablesOverrideWhatTheJobGives) {
  const auto p = process(merged(kSrunTask, {{"MASTER_ADDR", "10.1.0.7"}, {"MASTER_PORT", "29511"}}));
  EXPECT_EQ(p->master_addr.value, "10.1.0.7");
  EXPECT_EQ(p->master_port.value, 29511);
  EXPECT_EQ(p->master_addr.from, "MASTER_ADDR");
}

TEST(LaunchEnv, RankSetByHandThatContradictsSlurmIsAnError) {
  // `export RANK=0` in the sbatch script, then srun: every task would claim rank 0.
  const std::string e = process_error(merged(kSrunTask, {{"RANK", "0"}}));
  EXPECT_NE(e.find("RANK=0 contradicts SLURM_PROCID=3 (SLURM srun)"), std::string::npos) << e;
  EXPECT_NE(process_error(merged(kSrunTask, {{"WORLD_SIZE", "8"}})).find("WORLD_SIZE=8 contradicts SLURM_NTASKS=4"),
            std::string::npos);
  // Set from SLURM's own values (a common wrapper): no contradiction.
  EXPECT_EQ(process(merged(kSrunTask, {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}}))->rank, 3);
}

TEST(LaunchEnv, LauncherUnderSrunWins) {
  // fsdpp-run started by srun (one per node): its workers see both; fsdpp-run's are theirs.
  const auto p = process(merged(kSrunTask, {{"FSDPP_LAUNCHER", "fsdpp-run"}, {"RANK", "6"}, {"WORLD_SIZE", "8"},
                                            {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"},
                                            {"MASTER_ADDR", "gpu07"}, {"MASTER_PORT", "19242"}}));
  EXPECT_EQ(p->environment, "fsdpp-run");
  EXPECT_EQ(p->rank, 6);
  EXPECT_EQ(p->world_size, 8);
  // torchrun's workers likewise (TORCHELASTIC_RUN_ID marks them).
  const auto t = process(merged(kSrunTask, {{"TORCHELASTIC_RUN_ID", "none"}, {"RANK", "5"}, {"WORLD_SIZE", "8"},
                                            {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(t->environment, "torchrun");
  EXPECT_EQ(t->rank, 5);
}

TEST(LaunchEnv, OpenMpi) {
  const auto p = process(kOpenMpiRank);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->environment, "Open MPI");
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->world_size, 2);
  EXPECT_EQ(p->local_rank, 1);
  EXPECT_EQ(p->master_addr.value, "127.0.0.1");  // every rank on this node
  EXPECT_EQ(p->master_port.value, 15000 + 1168375809 % 10000);
  // Two nodes: which host runs rank 0 is not in Open MPI's variables.
  const auto two_nodes = merged(kOpenMpiRank, {{"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(process_error(two_nodes).find("MASTER_ADDR is not set, and Open MPI does not say which host runs rank 0"),
            std::string::npos);
  EXPECT_EQ(process(merged(two_nodes, {{"MASTER_ADDR", "node0"}}))->master_addr.value, "node0");
  // mpirun inside an sbatch script's allocation: the orted's SLURM_PROCID is not the rank.
  EXPECT_EQ(process(merged(kSrunTask, kOpenMpiRank))->environment, "Open MPI");
  EXPECT_NE(process_error(merged(kOpenMpiRank, {{"RANK", "0"}})).find("RANK=0 contradicts OMPI_COMM_WORLD_RANK=1"),
            std::string::npos);
}

TEST(LaunchEnv, MpichPmi) {
  const Vars hydra = {{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}};
  EXPECT_NE(process_error(hydra).find("MASTER_ADDR is not set, and MPI (PMI) does not say"), std::string::npos);
  const auto p = process(merged(hydra, {{"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29400"}}));
  EXPECT_EQ(p->environment, "MPI (PMI)");
  EXPECT_EQ(p->rank, 2);
  EXPECT_EQ(p->local_world_size, 2);
  // One node, no MASTER_PORT: MPICH gives no job id to derive a port from.
  EXPECT_NE(process_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}).find("MASTER_PORT is not set but WORLD_SIZE=2"),
            std::string::npos);
  // srun --mpi=pmi2: PMI's rank, SLURM's store address.
  const auto s = process(merged(kSrunTask, {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}));
  EXPECT_EQ(s->environment, "MPI (PMI)");
  EXPECT_EQ(s->master_addr.value, "gpu07");
  EXPECT_EQ(s->master_port.value, 19242);
}

TEST(LaunchEnv, KubeflowPodWithoutLauncher) {
  // PyTorchJob, nprocPerNode 1: RANK is the pod's index, WORLD_SIZE the pods.
  const Vars pod = {{"RANK", "2"},           {"WORLD_SIZE", "3"},      {"MASTER_ADDR", "job-master-0"},
                    {"MASTER_PORT", "23456"}, {"PET_NPROC_PER_NODE", "1"}, {"PET_NODE_RANK", "2"},
                    {"PET_NNODES", "3"}};
  const auto p = process(pod);
  EXPECT_EQ(p->environment, "Kubeflow PyTorchJob");
  EXPECT_EQ(p->rank, 2);
  EXPECT_EQ(p->local_world_size, 1);
  EXPECT_EQ(p->master_addr.value, "job-master-0");
  EXPECT_NE(process_error(merged(pod, {{"PET_NPROC_PER_NODE", "8"}, {"WORLD_SIZE", "24"}}))
                .find("PET_NPROC_PER_NODE=8 processes, but it was started without a launcher"),
            std::string::npos);
  // Kubeflow Trainer sets only PET_*: without fsdpp-run this would be a job of one process.
  EXPECT_NE(process_error({{"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "4"}, {"PET_NODE_RANK", "0"}})
                .find("ask for 8 processes, but no launcher started this one"),
            std::string::npos);
}

// The seeds' two-node recipe run without a launcher (issue 31): RANK=4 of WORLD_SIZE=8 with the
// store on another host says nothing of which ranks share this node; before, LOCAL_* defaulted to
// RANK/WORLD_SIZE (GPU 4, one node of 8 for HYBRID_SHARD).
TEST(LaunchEnv, RankByHandAcrossNodesNeedsLocalVariables) {
  const Vars seed = {{"RANK", "4"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "192.0.2.100"}, {"MASTER_PORT", "29500"}};
  const std::string e = process_error(seed);
  EXPECT_NE(e.find("RANK=4 and WORLD_SIZE=8 were set by hand with MASTER_ADDR=192.0.2.100, another host"),
            std::string::npos) << e;
  EXPECT_NE(e.find("set LOCAL_RANK and LOCAL_WORLD_SIZE"), std::string::npos) << e;
  EXPECT_NE(e.find("fsdpp-run --nproc-per-node N"), std::string::npos) << e;
  const auto p = process(merged(seed, {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}}));
  EXPECT_EQ(p->local_rank, 0);
  EXPECT_EQ(p->local_world_size, 4);
  EXPECT_EQ(p->rank, 4);
}

TEST(LaunchEnv, RankByHandOnThisHostDerivesAndSaysLocalVariables) {
  for (const char* addr : {"127.0.0.1", "localhost"}) {
    const auto p = process({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", addr}, {"MASTER_PORT", "29500"}});
    EXPECT_EQ(p->local_rank, 3);
    EXPECT_EQ(p->local_world_size, 4);
    EXPECT_NE(p->describe().find(std::string("LOCAL_RANK=3 LOCAL_WORLD_SIZE=4 derived: MASTER_ADDR=") + addr +
                                 " is this host"),
              std::string::npos) << p->describe();
  }
  const auto p = process({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
  EXPECT_NE(p->describe().find("derived: MASTER_ADDR unset"), std::string::npos) << p->describe();
}

TEST(LaunchEnv, DistEnvKeepsItsMessages) {
  const auto env = fsdpp::dist::DistEnv::from_lookup(lookup(kSrunTask));
  EXPECT_TRUE(env.launched);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.master_addr, "gpu07");
  EXPECT_EQ(env.master_port, 19242);
}

// ---- a node's launcher ------------------------------------------------------------------------

fsdpp::NodePlacement node(const Vars& vars, fsdpp::NodePlacement flags = {}) {
  return fsdpp::detect_node(std::move(flags), lookup(vars), "fsdpp-run");
}

std::string node_error(const Vars& vars, fsdpp::NodePlacement flags = {}) {
  try {
    node(vars, std::move(flags));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// `srun --ntasks-per-node=1 -N 2 fsdpp-run ...`: the launcher on the second node.
const Vars kSrunLauncher = {{"SLURM_JOB_ID", "900017"},       {"SLURM_STEP_ID", "1"},
                            {"SLURM_PROCID", "1"},            {"SLURM_NODEID", "1"},
                            {"SLURM_NTASKS", "2"},            {"SLURM_STEP_NUM_NODES", "2"},
                            {"SLURM_STEP_NUM_TASKS", "2"},    {"SLURM_STEP_NODELIST", "a100-[3,5]"},
                            {"SLURM_NTASKS_PER_NODE", "1"}};

TEST(LaunchEnvNode, SrunOneLauncherPerNode) {
  const auto n = node(kSrunLauncher);
  EXPECT_EQ(n.nnodes->value, 2);
  EXPECT_EQ(n.node_rank->value, 1);
  EXPECT_EQ(n.master_addr->value, "a100-3");
  EXPECT_EQ(n.master_port->value, 15000 + 17);
  EXPECT_FALSE(n.nproc_per_node.has_value());
  EXPECT_EQ(n.describe(),
            "SLURM srun (job 900017, step 1): node 1 of 2 (SLURM_NODEID, SLURM_STEP_NUM_NODES), store at "
            "a100-3:15017 (first host of SLURM_STEP_NODELIST=a100-[3,5]; port from SLURM_JOB_ID=900017)");
}

TEST(LaunchEnvNode, FlagsThatAgreeOrChooseTheStoreAreKept) {
  fsdpp::NodePlacement flags;
  flags.nnodes = fsdpp::Sourced<int>{2, "--nnodes"};
  flags.master_addr = fsdpp::Sourced<std::string>{"a100-3-ib", "--master-addr"};
  flags.master_port = fsdpp::Sourced<int>{29500, "--master-port"};
  const auto n = node(kSrunLauncher, flags);
  EXPECT_EQ(n.nnodes->from, "--nnodes");
  EXPECT_EQ(n.master_addr->value, "a100-3-ib");
  EXPECT_EQ(n.master_port->value, 29500);
}

TEST(LaunchEnvNode, ContradictionsNameBothSources) {
  fsdpp::NodePlacement flags;
  flags.nnodes = fsdpp::Sourced<int>{4, "--nnodes"};
  EXPECT_NE(node_error(kSrunLauncher, flags)
                .find("the number of nodes: --nnodes says 4, but SLURM_STEP_NUM_NODES=2 (SLURM srun)"),
            std::string::npos);
  flags = {};
  flags.node_rank = fsdpp::Sourced<int>{0, "--node-rank"};
  EXPECT_NE(node_error(kSrunLauncher, flags).find("--node-rank says 0, but SLURM_NODEID=1"), std::string::npos);
  // srun starting a launcher per GPU instead of per node.
  EXPECT_NE(node_error(merged(kSrunLauncher, {{"SLURM_STEP_NUM_TASKS", "16"}}))
                .find("srun started SLURM_STEP_NUM_TASKS=16 tasks on SLURM_STEP_NUM_NODES=2 nodes"),
            std::string::npos);
}

TEST(LaunchEnvNode, KubeflowPetVariables) {
  // PyTorchJob (training-operator) with nprocPerNode "4" and 3 replicas: pod 2.
  const Vars pod = {{"PET_NNODES", "3"},    {"PET_NPROC_PER_NODE", "4"}, {"PET_NODE_RANK", "2"},
                    {"RANK", "2"},          {"WORLD_SIZE", "12"},        {"MASTER_ADDR", "train-master-0"},
                    {"MASTER_PORT", "23456"}};
  const auto n = node(pod);
  EXPECT_EQ(n.environment, "Kubeflow");
  EXPECT_EQ(n.nnodes->value, 3);
  EXPECT_EQ(n.node_rank->value, 2);
  EXPECT_EQ(n.nproc_per_node->value, 4);
  EXPECT_EQ(n.master_addr->value, "train-master-0");
  EXPECT_EQ(n.master_port->value, 23456);
  // Kubeflow Trainer: PET_MASTER_ADDR/PORT.
  const auto t = node({{"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "8"}, {"PET_NODE_RANK", "0"},
                       {"PET_MASTER_ADDR", "job-node-0-0.job"}, {"PET_MASTER_PORT", "29400"}});
  EXPECT_EQ(t.master_addr->value, "job-node-0-0.job");
  EXPECT_EQ(t.master_port->from, "PET_MASTER_PORT");
  // An older PyTorchJob: RANK and WORLD_SIZE count pods.
  const auto old = node({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "m-0"}, {"MASTER_PORT", "23456"}});
  EXPECT_EQ(old.nnodes->value, 2);
  EXPECT_EQ(old.node_rank->value, 1);
  EXPECT_NE(node_error({{"PET_NNODES", "1:4"}, {"PET_NODE_RANK", "0"}}).find("elastic ranges"), std::string::npos);
  EXPECT_NE(node_error({{"PET_NPROC_PER_NODE", "auto"}}).find("PET_NPROC_PER_NODE=auto is not supported"),
            std::string::npos);
}

// The seeds' recipe with fsdpp-run on each node: RANK is the node's first rank.
TEST(LaunchEnvNode, RankByHandIsTheNodesFirstRank) {
  const Vars node1 = {{"RANK", "4"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "192.0.2.100"}, {"MASTER_PORT", "29500"}};
  fsdpp::NodePlacement flags;
  flags.nproc_per_node = fsdpp::Sourced<int>{4, "--nproc-per-node"};
  const auto n = node(node1, flags);
  EXPECT_EQ(n.nnodes->value, 2);
  EXPECT_EQ(n.node_rank->value, 1);
  EXPECT_EQ(n.master_addr->value, "192.0.2.100");
  EXPECT_EQ(n.master_port->value, 29500);
  EXPECT_EQ(n.describe(),
            "RANK/WORLD_SIZE set by hand (its workers get RANK 4-7 and LOCAL_RANK 0-3): node 1 of 2 "
            "(RANK=4 / 4 per node, WORLD_SIZE=8 / 4 per node), store at 192.0.2.100:29500 (MASTER_ADDR; "
            "MASTER_PORT)");
  fsdpp::NodePlacement three;
  three.nproc_per_node = fsdpp::Sourced<int>{3, "--nproc-per-node"};
  const std::string e = node_error(node1, three);
  EXPECT_NE(e.find("both must be multiples of the workers per node (3 from --nproc-per-node)"), std::string::npos)
      << e;
  fsdpp::NodePlacement contradicts = flags;
  contradicts.node_rank = fsdpp::Sourced<int>{0, "--node-rank"};
  EXPECT_NE(node_error(node1, contradicts).find("--node-rank says 0, but RANK=4 / 4 per node=1"), std::string::npos)
      << node_error(node1, contradicts);
}

TEST(LaunchEnvNode, PortFromJobId) {
  EXPECT_EQ(fsdpp::port_from_job_id("12", "SLURM_JOB_ID"), 15012);
  EXPECT_EQ(fsdpp::port_from_job_id("123456789", "SLURM_JOB_ID"), 21789);
  EXPECT_THROW(fsdpp::port_from_job_id("12_3", "SLURM_JOB_ID"), ConfigError);
}

}  // namespace
