// fsdpp-run end to end: the built launcher runs the `probe` worker as real subprocesses.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kRun = FSDPP_RUN_PATH;
const std::string kProbe = PROBE_PATH;

// Variables to set (a value) or remove (nullopt) in the launcher's environment.
using Env = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct Result {
  int exit_code = -1;  // -1 if the launcher itself died by a signal
  std::string out;
  std::string err;
  double seconds = 0;  // from wait() to the launcher's exit
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "fsdpp-launch-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// A child process with its stdout and stderr captured.
class Process {
 public:
  Process(const std::vector<std::string>& args, const Env& env) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string key = entry.substr(0, entry.find('='));
      bool overridden = false;
      for (const auto& [k, v] : env) overridden = overridden || k == key;
      if (!overridden) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : env) {
      if (v) env_strings.push_back(k + "=" + *v);
    }
    std::vector<std::string> argv_strings = args;
    std::vector<char*> argv, envp;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe2 failed");
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }

  ~Process() {
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  pid_t pid() const { return pid_; }

  // Collects output until the process exits and its pipes close; SIGKILLs it after `timeout`.
  Result wait(std::chrono::milliseconds timeout = 20s) {
    Result result;
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    int status = 0;
    while (Clock::now() < deadline && (!exited_ || out_fd_ >= 0 || err_fd_ >= 0)) {
      pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
      if (::poll(fds, 2, 50) > 0) {
        read_into(out_fd_, fds[0].revents, result.out);
        read_into(err_fd_, fds[1].revents, result.err);
      }
      if (!exited_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
    }
    if (!exited_) {
      ADD_FAILURE() << "fsdpp-run did not exit within " << timeout.count() << " ms\nstdout:\n"
                    << result.out << "\nstderr:\n"
                    << result.err;
    }
    return result;
  }

 private:
  static void read_into(int& fd, short revents, std::string& sink) {
    if (fd < 0 || revents == 0) return;
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      sink.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      ::close(fd);
      fd = -1;
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool exited_ = false;
};

// A TCP port free on 127.0.0.1 a moment ago.
int free_port() {
  const int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (sock < 0 || ::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("cannot find a free port");
  }
  ::close(sock);
  return ntohs(addr.sin_port);
}

std::vector<std::string> with_run(std::vector<std::string> args) {
  args.insert(args.begin(), kRun);
  return args;
}

Result launch(const std::vector<std::string>& args, const Env& env = {}) {
  Process p(with_run(args), env);
  return p.wait();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// KEY=VALUE lines that `probe env` printed as rank `rank`.
std::map<std::string, std::string> env_of_rank(const std::string& out, int rank) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::map<std::string, std::string> env;
  for (const std::string& line : lines_of(out)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string kv = line.substr(prefix.size());
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

pid_t read_pid(const TempDir& dir, const std::string& name, int rank) {
  return static_cast<pid_t>(
      std::atoi(read_file(dir.path() / (name + "." + std::to_string(rank))).c_str()));
}

bool wait_for_files(const TempDir& dir, const std::string& name, int ranks,
                    std::chrono::milliseconds timeout = 10s) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (int r = 0; r < ranks; ++r)
      all = all && fs::exists(dir.path() / (name + "." + std::to_string(r)));
    if (all) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

bool has_marker(const TempDir& dir, const std::string& name, int rank) {
  return fs::exists(dir.path() / (name + "." + std::to_string(rank)));
}

// The launcher reaps its workers, so a worker it stopped must be gone entirely.
bool reaped(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

// A grandchild is reparented to init, which may be slow to reap it (or never, in a container):
// dead means gone or a zombie.
bool dead_soon(pid_t pid, std::chrono::milliseconds timeout = 2s) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z')
      return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `a` with the variables of `b` set over it.
Env plus_env(Env a, const Env& b) {
  for (const auto& entry : b) {
    std::erase_if(a, [&](const auto& kv) { return kv.first == entry.first; });
    a.push_back(entry);
  }
  return a;
}

template <typename... Args>
std::string fmt_line(const char* format, Args... args) {
  std::string out;
  std::vector<std::string> values = {std::to_string(args)...};
  size_t next = 0;
  for (const char* p = format; *p != '\0'; ++p) {
    if (p[0] == '{' && p[1] == '}') {
      out += values.at(next++);
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

TEST(LauncherEnv, SingleNodeSetsRankVariables) {
  const Result r = launch({"--nproc-per-node", "3", kProbe, "env"}, {{"OMP_NUM_THREADS", {}}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string port;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = env_of_rank(r.out, rank);
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["FSDPP_TIMEOUT_S"], "300");
    EXPECT_EQ(env["FSDPP_RESTART_COUNT"], "0");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    const std::string& p = env["MASTER_PORT"];
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.find_first_not_of("0123456789"), std::string::npos) << p;
    const int value = std::atoi(p.c_str());
    EXPECT_GT(value, 0);
    EXPECT_LE(value, 65535);
    if (rank == 0) port = p;
    EXPECT_EQ(p, port) << "every rank must see the same MASTER_PORT";
  }
}

// Two launchers on this host form one job of 2 nodes x 2 ranks (tests/multinode/ does the same
// across network namespaces with real training).
TEST(LauncherEnv, MultiNodeOffsetsRanks) {
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Process>> nodes;
  for (int node : {1, 0}) {  // node 1 first: it waits for node 0's store
    nodes.push_back(std::make_unique<Process>(
        with_run({"--nnodes", "2", "--node-rank", std::to_string(node), "--nproc-per-node", "2",
                  "--master-addr", "127.0.0.1", "--master-port", port, "--timeout-s", "42",
                  "--rdzv-timeout-s", "30", kProbe, "env"}),
        // Under make test-asan, LeakSanitizer's own tracer crashed at node 1's exit (signal 11
        // in StopTheWorld, "LeakSanitizer has encountered a fatal error") in two full runs out
        // of two, and never alone; not a leak report. The other launcher tests keep the leak
        // check on fsdpp-run.
        Env{{"LSAN_OPTIONS", std::string("detect_leaks=0")}}));
  }
  const Result node1 = nodes[0]->wait(30s);
  const Result node0 = nodes[1]->wait(30s);
  ASSERT_EQ(node0.exit_code, 0) << node0.err;
  ASSERT_EQ(node1.exit_code, 0) << node1.err;
  for (int rank = 0; rank < 4; ++rank) {
    const Result& r = rank < 2 ? node0 : node1;
    auto env = env_of_rank(r.out, rank);
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(env["NODE_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], port);
    EXPECT_EQ(env["FSDPP_TIMEOUT_S"], "42");
    EXPECT_EQ(env["FSDPP_AGENT_STORE"], "1") << "node 0's launcher hosts the workers' store";
  }
  EXPECT_TRUE(env_of_rank(node0.out, 2).empty()) << node0.out;
  EXPECT_TRUE(env_of_rank(node1.out, 0).empty()) << node1.out;
  EXPECT_NE(node1.err.find("[fsdpp-run] node 1: 2 nodes joined at 127.0.0.1:" + port),
            std::string::npos)
      << node1.err;
}

TEST(LauncherEnv, SingleNodeHasNoAgentStore) {
  const Result r = launch({kProbe, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto env = env_of_rank(r.out, 0);
  EXPECT_EQ(env["FSDPP_AGENT_STORE"], "<unset>");
  EXPECT_EQ(env["NODE_RANK"], "0");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
}

TEST(LauncherEnv, KeepsUserOmpNumThreads) {
  const Result r = launch({kProbe, "env"}, {{"OMP_NUM_THREADS", "4"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(env_of_rank(r.out, 0)["OMP_NUM_THREADS"], "4");
}

// A SLURM job id whose derived port (15000 + id % 10000) is free on 127.0.0.1 now.
int job_id_with_free_port() {
  for (int id = 100 + static_cast<int>(::getpid() % 9000);; id = 100 + (id + 37) % 9800) {
    const int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(15000 + id));
    const bool free = ::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(sock);
    if (free) return id;
  }
}

// Runs one launcher per node with `env_of(node)` added to its environment, and the workers'
// `probe env`; returns each node's result.
std::vector<Result> launch_nodes(int nnodes, const std::vector<std::string>& flags,
                                 const std::function<Env(int)>& env_of) {
  std::vector<std::unique_ptr<Process>> nodes;
  for (int node = nnodes - 1; node >= 0; --node) {
    Env env = env_of(node);
    env.emplace_back("LSAN_OPTIONS", std::string("detect_leaks=0"));  // as MultiNodeOffsetsRanks
    nodes.push_back(std::make_unique<Process>(plus(with_run(flags), {kProbe, "env"}), env));
  }
  std::vector<Result> results(static_cast<size_t>(nnodes));
  for (int node = nnodes - 1; node >= 0; --node) {
    results[static_cast<size_t>(node)] = nodes[static_cast<size_t>(nnodes - 1 - node)]->wait(40s);
  }
  return results;
}

void expect_ranks(const std::vector<Result>& nodes, int nproc, const std::string& port) {
  const int world = static_cast<int>(nodes.size()) * nproc;
  for (int rank = 0; rank < world; ++rank) {
    auto env = env_of_rank(nodes[static_cast<size_t>(rank / nproc)].out, rank);
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], std::to_string(world));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % nproc));
    EXPECT_EQ(env["NODE_RANK"], std::to_string(rank / nproc));
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], port);
    EXPECT_EQ(env["FSDPP_LAUNCHER"], "fsdpp-run");
  }
}

// `srun --ntasks-per-node=1 -N 2 fsdpp-run --nproc-per-node 2 ...`: each launcher finds its node
// rank, the node count and the store (first host, port from the job id) in srun's variables. The
// host list's first entry is 127.0.0.1 so that both launchers can meet on this machine.
TEST(LauncherEnv, SrunOneLauncherPerNode) {
  const int job = job_id_with_free_port();
  const auto nodes = launch_nodes(2, {"--nproc-per-node", "2", "--rdzv-timeout-s", "30"}, [&](int node) {
    return Env{{"SLURM_JOB_ID", std::to_string(job)}, {"SLURM_STEP_ID", "0"},
               {"SLURM_PROCID", std::to_string(node)}, {"SLURM_NODEID", std::to_string(node)},
               {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NUM_TASKS", "2"},
               {"SLURM_STEP_NODELIST", "127.0.0.[1-2]"}};
  });
  ASSERT_EQ(nodes[0].exit_code, 0) << nodes[0].err;
  ASSERT_EQ(nodes[1].exit_code, 0) << nodes[1].err;
  expect_ranks(nodes, 2, std::to_string(15000 + job));
  EXPECT_NE(nodes[1].err.find(fmt_line("[fsdpp-run] SLURM srun (job {}, step 0): node 1 of 2 (SLURM_NODEID, "
                                       "SLURM_STEP_NUM_NODES), store at 127.0.0.1:{} (first host of "
                                       "SLURM_STEP_NODELIST=127.0.0.[1-2]; port from SLURM_JOB_ID={})\n",
                                       job, 15000 + job, job)),
            std::string::npos)
      << nodes[1].err;
}

// A Kubeflow PyTorchJob (nprocPerNode "2", 2 replicas) with fsdpp-run as the container's command.
TEST(LauncherEnv, KubeflowPodsTakeThePetVariables) {
  const std::string port = std::to_string(free_port());
  const auto nodes = launch_nodes(2, {"--rdzv-timeout-s", "30"}, [&](int node) {
    return Env{{"PET_NNODES", "2"},         {"PET_NPROC_PER_NODE", "2"}, {"PET_NODE_RANK", std::to_string(node)},
               {"RANK", std::to_string(node)}, {"WORLD_SIZE", "4"},      {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", port}};
  });
  ASSERT_EQ(nodes[0].exit_code, 0) << nodes[0].err;
  ASSERT_EQ(nodes[1].exit_code, 0) << nodes[1].err;
  expect_ranks(nodes, 2, port);
  EXPECT_NE(nodes[0].err.find("[fsdpp-run] Kubeflow: node 0 of 2 (PET_NODE_RANK, PET_NNODES), 2 worker(s) per "
                              "node (PET_NPROC_PER_NODE), store at 127.0.0.1:" + port),
            std::string::npos)
      << nodes[0].err;
}

// torchrun's spellings of the rendezvous: --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --rdzv-id.
TEST(LauncherEnv, TorchrunRendezvousFlags) {
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Process>> nodes;
  for (int node : {1, 0}) {
    nodes.push_back(std::make_unique<Process>(
        with_run({"--nnodes=2", "--node_rank=" + std::to_string(node), "--nproc_per_node=1",
                  "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:" + port, "--rdzv_id=job7",
                  "--rdzv-timeout-s", "30", kProbe, "env"}),
        Env{{"LSAN_OPTIONS", std::string("detect_leaks=0")}}));
  }
  std::vector<Result> r = {nodes[1]->wait(30s), nodes[0]->wait(30s)};
  ASSERT_EQ(r[0].exit_code, 0) << r[0].err;
  ASSERT_EQ(r[1].exit_code, 0) << r[1].err;
  expect_ranks(r, 1, port);
  // Another --rdzv-id is another job: the launchers refuse to mix.
  const std::string port2 = std::to_string(free_port());
  Process a(with_run({"--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:" + port2,
                      "--rdzv-id", "a", kProbe, "exit", "0"}), {});
  Process b(with_run({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:" + port2,
                      "--rdzv-id", "b", kProbe, "exit", "0"}), {});
  for (Process* p : {&a, &b}) {
    const Result res = p->wait(30s);
    EXPECT_EQ(res.exit_code, 1) << res.err;
    EXPECT_NE(res.err.find("the nodes disagree: node 0 has --rdzv-id 'a', node 1"), std::string::npos) << res.err;
  }
}

TEST(LauncherEnv, StandaloneIgnoresTheEnvironment) {
  // Inside an interactive srun shell of a 2-node step, --standalone is still one node.
  const Result r = launch({"--standalone", "--nproc-per-node", "2", kProbe, "env"},
                          {{"SLURM_JOB_ID", "5"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NODEID", "1"},
                           {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NUM_TASKS", "2"},
                           {"SLURM_STEP_NODELIST", "n[1-2]"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(env_of_rank(r.out, 1)["WORLD_SIZE"], "2");
  EXPECT_EQ(env_of_rank(r.out, 1)["MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(r.err, "");
}

// A contradiction between a flag and the environment, or between flags: exit 2, both named.
TEST(LauncherUsage, PlacementContradictionsNameBothSources) {
  const Env srun = {{"SLURM_JOB_ID", "5"},           {"SLURM_STEP_ID", "0"},          {"SLURM_NODEID", "0"},
                    {"SLURM_STEP_NUM_NODES", "2"},   {"SLURM_STEP_NUM_TASKS", "2"},   {"SLURM_STEP_NODELIST", "n[1-2]"}};
  const struct {
    std::vector<std::string> flags;
    Env env;
    std::string expected;
  } cases[] = {
      {{"--nnodes", "3"}, srun, "--nnodes says 3, but SLURM_STEP_NUM_NODES=2 (SLURM srun)"},
      {{}, plus_env(srun, {{"SLURM_STEP_NUM_TASKS", "16"}}), "srun started SLURM_STEP_NUM_TASKS=16 tasks"},
      {{"--rdzv-backend", "etcd"}, {}, "--rdzv-backend etcd is not supported"},
      {{"--rdzv-endpoint", "host:99999"}, {}, "--rdzv-endpoint expects HOST[:PORT]"},
      {{"--master-port", "1234", "--rdzv-endpoint", "h:29400"}, {}, "--master-port 1234 and --rdzv-endpoint h:29400"},
      {{"--standalone", "--nnodes", "2"}, {}, "--standalone is one node"},
      {{"--rdzv-id", "a b", "--nnodes", "2", "--master-port", "5"}, {}, "--rdzv-id must be"},
      {{}, {{"PET_NPROC_PER_NODE", "auto"}}, "PET_NPROC_PER_NODE=auto is not supported"},
  };
  for (const auto& c : cases) {
    const Result r = launch(plus(c.flags, {kProbe, "env"}), c.env);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
  }
}

TEST(LauncherOutput, PrefixesEachLineWithRank) {
  const Result r = launch({"--nproc-per-node", "2", kProbe, "lines", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& line : lines_of(r.out)) {
    EXPECT_TRUE(line.rfind("[rank 0] ", 0) == 0 || line.rfind("[rank 1] ", 0) == 0) << line;
  }
  for (const std::string& line : lines_of(r.err)) {
    EXPECT_TRUE(line.rfind("[rank 0] ", 0) == 0 || line.rfind("[rank 1] ", 0) == 0) << line;
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    for (int i = 0; i < 3; ++i) {
      EXPECT_NE(r.out.find(prefix + "out " + std::to_string(i) + "\n"), std::string::npos);
      EXPECT_NE(r.err.find(prefix + "err " + std::to_string(i) + "\n"), std::string::npos);
    }
    // The partial last line is flushed, with a newline, when the worker's stdout closes.
    EXPECT_NE(r.out.find(prefix + "tail\n"), std::string::npos) << r.out;
  }
  EXPECT_EQ(r.out.find("err "), std::string::npos) << "stderr lines must stay on stderr";
}

TEST(LauncherOutput, NoPrefixRelaysLinesAsIs) {
  const Result r = launch({"--no-prefix", kProbe, "lines", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "out 0\nout 1\ntail\n");
  EXPECT_EQ(r.err, "err 0\nerr 1\n");
}

TEST(LauncherOutput, LogDirWritesPerRankFiles) {
  TempDir dir;
  const fs::path logs = dir.path() / "logs";  // created by the launcher
  const Result r =
      launch({"--nproc-per-node", "2", "--log-dir", logs.string(), kProbe, "lines", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 1] out 1\n"), std::string::npos) << "stdout keeps its prefixes";
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = read_file(logs / ("rank" + std::to_string(rank) + ".log"));
    for (const char* line : {"out 0\n", "out 1\n", "err 0\n", "err 1\n", "tail\n"}) {
      EXPECT_NE(log.find(line), std::string::npos) << "rank" << rank << ".log:\n" << log;
    }
    EXPECT_EQ(log.find("[rank"), std::string::npos) << "log files hold the worker's own text";
  }
}

TEST(LauncherFailure, AllWorkersExitingZeroExitsZero) {
  const Result r = launch({"--nproc-per-node", "3", kProbe, "exit", "0", "100"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(LauncherFailure, WorkerExitCodeStopsTheOthers) {
  TempDir dir;
  const Result r =
      launch({"--nproc-per-node", "3", "--grace-s", "2", kProbe, "fail-rank", "1", "3"},
             {{"PROBE_DIR", dir.str()}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("[fsdpp-run] rank 1 (local 1, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 3; stopped the other 2 worker(s)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("[rank 1] rank 1 failing"), std::string::npos) << r.out;
  for (int rank : {0, 2}) {
    EXPECT_TRUE(has_marker(dir, "term", rank)) << "rank " << rank << " got no SIGTERM";
    EXPECT_TRUE(reaped(read_pid(dir, "pid", rank))) << "rank " << rank << " survived";
  }
}

TEST(LauncherFailure, WorkerKilledBySignalIsNamed) {
  TempDir dir;
  const Result r = launch({"--nproc-per-node", "2", "--grace-s", "2", kProbe, "signal-rank", "0",
                           std::to_string(SIGKILL)},
                          {{"PROBE_DIR", dir.str()}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 0 (local 0, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
  EXPECT_TRUE(reaped(read_pid(dir, "pid", 1)));
}

TEST(LauncherFailure, WorkersChildrenAreStoppedToo) {
  TempDir dir;
  // Rank 1's child ignores SIGTERM: only the SIGKILL to rank 1's process group ends it.
  const Result r =
      launch({"--nproc-per-node", "2", "--grace-s", "0.5", kProbe, "fail-rank", "0", "5"},
             {{"PROBE_DIR", dir.str()}, {"PROBE_GRANDCHILD", "1"}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 0 (local 0, pid "), std::string::npos) << r.err;
  EXPECT_TRUE(reaped(read_pid(dir, "pid", 1)));
  const pid_t grandchild = read_pid(dir, "child", 1);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(dead_soon(grandchild)) << "rank 1's child " << grandchild << " survived";
}

void expect_signal_forwarded(int signal, const std::string& marker, int expected_exit) {
  TempDir dir;
  Process p(with_run({"--nproc-per-node", "3", "--grace-s", "5", kProbe, "sleep"}),
            {{"PROBE_DIR", dir.str()}});
  ASSERT_TRUE(wait_for_files(dir, "pid", 3)) << "the probes did not start";
  ASSERT_EQ(::kill(p.pid(), signal), 0);
  const Result r = p.wait();
  EXPECT_EQ(r.exit_code, expected_exit) << r.err;
  EXPECT_LT(r.seconds, 4) << "the workers exit on the forwarded signal, no SIGKILL needed";
  EXPECT_EQ(r.err.find("SIGKILL"), std::string::npos) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(has_marker(dir, marker, rank)) << "rank " << rank << " never got the signal";
    EXPECT_TRUE(reaped(read_pid(dir, "pid", rank))) << "rank " << rank << " survived";
  }
}

TEST(LauncherSignals, SigtermIsForwardedAndExits143) {
  expect_signal_forwarded(SIGTERM, "term", 143);
}

TEST(LauncherSignals, SigintIsForwardedAndExits130) { expect_signal_forwarded(SIGINT, "int", 130); }

TEST(LauncherSignals, WorkerIgnoringSigtermIsKilledAfterGrace) {
  TempDir dir;
  Process p(with_run({"--nproc-per-node", "2", "--grace-s", "1", kProbe, "sleep"}),
            {{"PROBE_DIR", dir.str()}, {"PROBE_IGNORE_TERM", "1"}});
  ASSERT_TRUE(wait_for_files(dir, "pid", 2)) << "the probes did not start";
  ASSERT_EQ(::kill(p.pid(), SIGTERM), 0);
  const Result r = p.wait();
  EXPECT_EQ(r.exit_code, 143) << r.err;
  EXPECT_GE(r.seconds, 0.9) << "SIGKILL came before the grace period was over";
  EXPECT_LT(r.seconds, 5);
  EXPECT_NE(r.err.find("[fsdpp-run] sent SIGKILL to 2 worker(s) after 1 s"), std::string::npos)
      << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(has_marker(dir, "term", rank));
    EXPECT_TRUE(reaped(read_pid(dir, "pid", rank))) << "rank " << rank << " survived";
  }
}

TEST(LauncherRestart, RestartsOnceThenSucceeds) {
  const Result r =
      launch({"--nproc-per-node", "2", "--max-restarts", "1", kProbe, "fail-until", "1", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "[fsdpp-run] restarting workers (attempt 2 of 2)\n"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "restarting"), 1u) << r.err;
  EXPECT_NE(r.err.find("exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("[rank 0] ok attempt 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] ok attempt 1\n"), std::string::npos) << r.out;
}

TEST(LauncherRestart, GivesUpAfterMaxRestarts) {
  const Result r = launch({"--max-restarts", "2", kProbe, "fail-until", "5", "4"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count(r.err, "restarting workers (attempt 2 of 3)"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "restarting workers (attempt 3 of 3)"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "exited with code 4"), 3u) << r.err;
}

TEST(LauncherRestart, ConfigurationErrorIsNotRestarted) {
  // Exit code 2 (a usage or configuration error) would fail the same way again.
  const Result r = launch({"--max-restarts", "2", kProbe, "fail-until", "5", "2"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(count(r.err, "restarting workers"), 0u) << r.err;
  EXPECT_EQ(count(r.err, "exited with code 2"), 1u) << r.err;
  EXPECT_NE(r.err.find("not restarting: exit code 2 is a usage or configuration error"), std::string::npos) << r.err;
}

struct BadInput {
  std::string name;
  std::vector<std::string> flags;
  bool with_program;
  std::string expected;  // must appear in the one-line error
};

class LauncherUsage : public ::testing::TestWithParam<BadInput> {};

TEST_P(LauncherUsage, RejectsWithExitCode2) {
  const BadInput& c = GetParam();
  std::vector<std::string> args = c.flags;
  if (c.with_program) args.insert(args.end(), {kProbe, "env"});
  const Result r = launch(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "") << "no worker may start";
  EXPECT_EQ(count(r.err, "\n"), 1u) << "one line expected:\n" << r.err;
  EXPECT_EQ(r.err.rfind("[fsdpp-run] ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    BadInput, LauncherUsage,
    ::testing::Values(
        BadInput{"NprocNotANumber", {"--nproc-per-node", "abc"}, true, "--nproc-per-node"},
        BadInput{"NprocZero", {"--nproc-per-node", "0"}, true, "--nproc-per-node"},
        BadInput{"NprocHuge", {"--nproc-per-node", "99999999999"}, true, "--nproc-per-node"},
        BadInput{"NprocMissingValue", {"--nproc-per-node"}, false, "--nproc-per-node"},
        BadInput{"NnodesZero", {"--nnodes", "0"}, true, "--nnodes"},
        BadInput{"NodeRankTooLarge",
                 {"--nnodes", "2", "--node-rank", "2", "--master-port", "29500"},
                 true,
                 "--node-rank"},
        BadInput{"NodeRankNegative", {"--node-rank", "-1"}, true, "--node-rank"},
        BadInput{"PortOutOfRange", {"--master-port", "70000"}, true, "--master-port"},
        BadInput{"PortNotANumber", {"--master-port", "http"}, true, "--master-port"},
        BadInput{"MultiNodeWithoutPort", {"--nnodes", "2"}, true, "--master-port"},
        BadInput{"NegativeRestarts", {"--max-restarts", "-1"}, true, "--max-restarts"},
        BadInput{"TimeoutZero", {"--timeout-s", "0"}, true, "--timeout-s"},
        BadInput{"RdzvTimeoutZero", {"--rdzv-timeout-s", "0"}, true, "--rdzv-timeout-s"},
        BadInput{"HeartbeatTimeoutTiny", {"--heartbeat-timeout-s", "0.1"}, true,
                 "--heartbeat-timeout-s"},
        BadInput{"GraceNotANumber", {"--grace-s", "soon"}, true, "--grace-s"},
        BadInput{"GraceNegative", {"--grace-s", "-1"}, true, "--grace-s"},
        BadInput{"UnknownFlag", {"--bogus-flag"}, true, "--bogus-flag"},
        BadInput{"NoProgram", {}, false, "PROGRAM"},
        BadInput{"NoProgramAfterFlags", {"--nproc-per-node", "2", "--"}, false, "PROGRAM"}),
    [](const auto& info) { return info.param.name; });

TEST(LauncherUsage, ExecFailureIsReported) {
  for (const std::string program : {"/nonexistent/fsdpp-probe", "fsdpp-no-such-program"}) {
    const Result r = launch({"--nproc-per-node", "2", program, "arg"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "[fsdpp-run] cannot execute '" + program + "': No such file or directory\n");
  }
}

TEST(LauncherUsage, DoubleDashStartsTheCommand) {
  const Result r = launch({"--nproc-per-node", "1", "--", kProbe, "exit", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}


// ---------------------------------------------------------------------------------------------
// Several nodes: launchers on this host, each playing one node, meeting on 127.0.0.1.

// The flags of node `node` of a job of `nnodes` x `nproc` on `port`.
std::vector<std::string> node_flags(int node, int nnodes, int nproc, int port,
                                    const std::string& rdzv_timeout = "30",
                                    const std::string& heartbeat_timeout = "2") {
  return with_run({"--nnodes", std::to_string(nnodes), "--node-rank", std::to_string(node),
                   "--nproc-per-node", std::to_string(nproc), "--master-addr", "127.0.0.1",
                   "--master-port", std::to_string(port), "--rdzv-timeout-s", rdzv_timeout,
                   "--heartbeat-timeout-s", heartbeat_timeout, "--grace-s", "2"});
}


TEST(LauncherMultiNode, MissingNodeIsNamedWithinTheRendezvousTimeout) {
  const int port = free_port();
  // Nodes 0 and 2 of 3 come; node 1 never does. (Loading the store module takes a second or
  // two on a busy machine: the timeout leaves room for node 0's to be up in time for node 2.)
  Process n0(plus(node_flags(0, 3, 1, port, "6"), {kProbe, "exit", "0"}), {});
  Process n2(plus(node_flags(2, 3, 1, port, "6"), {kProbe, "exit", "0"}), {});
  const Result r0 = n0.wait(30s);
  const Result r2 = n2.wait(30s);
  for (const Result* r : {&r0, &r2}) {
    EXPECT_EQ(r->exit_code, 1) << r->err;
    EXPECT_NE(r->err.find("timed out after 6 s: node rank(s) 1 of 3 did not arrive (arrived: 0, 2)"),
              std::string::npos)
        << r->err;
    EXPECT_EQ(r->out, "") << "no worker may start";
    EXPECT_LT(r->seconds, 15);
  }
  const std::string where = "rendezvous at 127.0.0.1:" + std::to_string(port) + " failed: ";
  EXPECT_NE(r0.err.find("[fsdpp-run] node 0: " + where), std::string::npos) << r0.err;
  EXPECT_NE(r2.err.find("[fsdpp-run] node 2: " + where), std::string::npos) << r2.err;
}

TEST(LauncherMultiNode, MissingNodeZeroIsNamed) {
  const int port = free_port();
  const Result r = Process(plus(node_flags(1, 2, 1, port, "1.5"), {kProbe, "exit", "0"}), {}).wait(20s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("[fsdpp-run] node 1: rendezvous timed out after 1.5 s: node rank 0 did not "
                       "arrive (its store at 127.0.0.1:" + std::to_string(port) +
                       " cannot be reached: Connection refused)"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 6);
}

TEST(LauncherMultiNode, DisagreeingNodesAreRejected) {
  const int port = free_port();
  Process n0(plus(node_flags(0, 2, 2, port), {kProbe, "exit", "0"}), {});
  Process n1(plus(node_flags(1, 2, 1, port), {kProbe, "exit", "0"}), {});
  for (Process* p : {&n0, &n1}) {
    const Result r = p->wait(20s);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("the nodes disagree: node 0 has --nnodes 2 --nproc-per-node 2, node 1"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(LauncherMultiNode, NodeZeroWaitsForTheOthersToFinish) {
  const int port = free_port();
  Process n0(plus(node_flags(0, 2, 1, port), {kProbe, "exit", "0"}), {});
  Process n1(plus(node_flags(1, 2, 1, port), {kProbe, "exit", "0", "2000"}), {});
  const Result r0 = n0.wait(20s);
  const Result r1 = n1.wait(20s);
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  // Node 0 hosts the store node 1 still uses: it exits after node 1's worker, not before.
  EXPECT_GE(r0.seconds, 1.9) << r0.err;
}

// A worker that fails on node 1 stops node 0's workers, and node 0's message names node 1.
TEST(LauncherMultiNode, WorkerFailureOnOneNodeStopsEveryNode) {
  TempDir dir;
  const int port = free_port();
  const Env env{{"PROBE_DIR", dir.str()}};
  Process n0(plus(node_flags(0, 2, 2, port), {kProbe, "fail-rank", "3", "7", "1500"}), env);
  Process n1(plus(node_flags(1, 2, 2, port), {kProbe, "fail-rank", "3", "7", "1500"}), env);
  const Result r1 = n1.wait(30s);
  const Result r0 = n0.wait(30s);
  EXPECT_EQ(r1.exit_code, 1) << r1.err;
  EXPECT_EQ(r0.exit_code, 1) << r0.err;
  EXPECT_NE(r1.err.find("[fsdpp-run] node 1: rank 3 (local 1, pid "), std::string::npos) << r1.err;
  EXPECT_NE(r0.err.find("[fsdpp-run] node 0: the job failed on another node: node 1: rank 3 "
                        "(local 1, pid "),
            std::string::npos)
      << r0.err;
  EXPECT_NE(r0.err.find("exited with code 7; stopped this node's 2 worker(s)"), std::string::npos)
      << r0.err;
  for (int rank : {0, 1, 2}) {
    EXPECT_TRUE(has_marker(dir, "term", rank)) << "rank " << rank << " got no SIGTERM";
  }
}

// Node `victim`'s launcher is SIGKILLed while every worker sleeps: the other launcher stops its
// workers and exits 1 within seconds, naming the node.
void expect_killed_node_stops_the_other(int victim, const std::string& expected) {
  TempDir dir;
  const int port = free_port();
  const Env env{{"PROBE_DIR", dir.str()}};
  Process n0(plus(node_flags(0, 2, 2, port), {kProbe, "sleep"}), env);
  Process n1(plus(node_flags(1, 2, 2, port), {kProbe, "sleep"}), env);
  ASSERT_TRUE(wait_for_files(dir, "pid", 4, 30s)) << "the probes did not start";
  Process& killed = victim == 0 ? n0 : n1;
  Process& other = victim == 0 ? n1 : n0;
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(killed.pid(), SIGKILL), 0);
  const Result r = other.wait(30s);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  EXPECT_LT(seconds, 10) << r.err;
  const int first = victim == 0 ? 2 : 0;
  for (int rank = first; rank < first + 2; ++rank) {
    EXPECT_TRUE(has_marker(dir, "term", rank)) << "rank " << rank << " got no SIGTERM";
    EXPECT_TRUE(reaped(read_pid(dir, "pid", rank))) << "rank " << rank << " survived";
  }
  // The killed launcher's own workers die with it (parent-death signal).
  for (int rank = 2 - first; rank < 4 - first; ++rank) {
    EXPECT_TRUE(dead_soon(read_pid(dir, "pid", rank), 5s)) << "rank " << rank << " survived";
  }
  killed.wait(5s);
  std::printf("[multi-node] node %d's launcher killed: the other exited %d after %.1f s\n", victim,
              r.exit_code, seconds);
}

TEST(LauncherMultiNode, KilledLauncherOfNodeOneStopsNodeZero) {
  expect_killed_node_stops_the_other(
      1, "[fsdpp-run] node 0: the job failed on another node: node 1's launcher stopped "
         "responding: no heartbeat for ");
}

TEST(LauncherMultiNode, KilledLauncherOfNodeZeroStopsNodeOne) {
  expect_killed_node_stops_the_other(
      0, "[fsdpp-run] node 1: the job failed on another node: lost node 0's launcher, which "
         "hosts the job's store at 127.0.0.1:");
}

TEST(LauncherMultiNode, SigtermToOneLauncherStopsEveryNode) {
  TempDir dir;
  const int port = free_port();
  const Env env{{"PROBE_DIR", dir.str()}};
  Process n0(plus(node_flags(0, 2, 1, port), {kProbe, "sleep"}), env);
  Process n1(plus(node_flags(1, 2, 1, port), {kProbe, "sleep"}), env);
  ASSERT_TRUE(wait_for_files(dir, "pid", 2, 30s)) << "the probes did not start";
  ASSERT_EQ(::kill(n1.pid(), SIGTERM), 0);
  const Result r1 = n1.wait(20s);
  const Result r0 = n0.wait(20s);
  EXPECT_EQ(r1.exit_code, 143) << r1.err;
  EXPECT_EQ(r0.exit_code, 1) << r0.err;
  EXPECT_NE(r0.err.find("the job failed on another node: node 1's launcher received SIGTERM"),
            std::string::npos)
      << r0.err;
  EXPECT_LT(r0.seconds, 10);
  EXPECT_TRUE(has_marker(dir, "term", 0));
  EXPECT_TRUE(has_marker(dir, "term", 1));
}

TEST(LauncherMultiNode, SignalDuringTheRendezvousStartsNothing) {
  const int port = free_port();
  Process n0(plus(node_flags(0, 2, 1, port), {kProbe, "exit", "0"}), {});
  std::this_thread::sleep_for(1500ms);  // loading the store module takes a moment
  ASSERT_EQ(::kill(n0.pid(), SIGINT), 0);
  const Result r = n0.wait(20s);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("[fsdpp-run] node 0: received SIGINT during the rendezvous; no worker was "
                       "started"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 5);
}

}  // namespace

// --max-restarts across nodes: a worker failing on node 1 stops node 0's too, and both nodes
// start round 2 together (FSDPP_RESTART_COUNT=1 on every rank).
TEST(LauncherMultiNode, RestartsEveryNodeTogether) {
  const int port = free_port();
  const TempDir dir;
  const Env env = {{"PROBE_DIR", dir.str()}, {"LSAN_OPTIONS", std::string("detect_leaks=0")}};
  Process n0(plus(node_flags(0, 2, 1, port), {"--max-restarts", "1", kProbe, "sleep-until", "1"}), env);
  Process n1(plus(node_flags(1, 2, 1, port), {"--max-restarts", "1", kProbe, "fail-until", "1", "3"}), env);
  const Result r0 = n0.wait(40s);
  const Result r1 = n1.wait(40s);
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_NE(r0.out.find("[rank 0] ok attempt 1"), std::string::npos) << r0.out;
  EXPECT_NE(r1.out.find("[rank 1] ok attempt 1"), std::string::npos) << r1.out;
  for (const Result* r : {&r0, &r1}) {
    EXPECT_NE(r->err.find("every node is back; restarting the workers of every node (attempt 2 of 2)"),
              std::string::npos)
        << r->err;
  }
  EXPECT_NE(r0.err.find("the job failed on another node: node 1: rank 1 (local 0, pid"), std::string::npos) << r0.err;
}

TEST(LauncherMultiNode, RestartsRunOut) {
  const int port = free_port();
  const Env env = {{"LSAN_OPTIONS", std::string("detect_leaks=0")}};
  Process n0(plus(node_flags(0, 2, 1, port), {"--max-restarts", "1", kProbe, "sleep"}), env);
  Process n1(plus(node_flags(1, 2, 1, port), {"--max-restarts", "1", kProbe, "fail-until", "5", "3"}), env);
  const Result r0 = n0.wait(40s);
  const Result r1 = n1.wait(40s);
  EXPECT_EQ(r0.exit_code, 1) << r0.err;
  EXPECT_EQ(r1.exit_code, 1) << r1.err;
  EXPECT_EQ(count(r1.err, "restarting the workers of every node"), 1u) << r1.err;
  EXPECT_NE(r1.err.find("no restart: the last of --max-restarts 1 restarts failed too"), std::string::npos) << r1.err;
}

// A node whose launcher dies does not come back: the others end the job at the restart, naming it.
TEST(LauncherMultiNode, NodeThatDoesNotComeBackIsNamed) {
  const int port = free_port();
  const TempDir dir;
  const Env env = {{"PROBE_DIR", dir.str()}, {"LSAN_OPTIONS", std::string("detect_leaks=0")}};
  Process n0(plus(node_flags(0, 2, 1, port), {"--max-restarts", "2", kProbe, "sleep"}), env);
  Process n1(plus(node_flags(1, 2, 1, port), {"--max-restarts", "2", kProbe, "sleep"}), env);
  ASSERT_TRUE(wait_for_files(dir, "pid", 2, 30s));
  ::kill(n1.pid(), SIGKILL);
  const Result r0 = n0.wait(40s);
  EXPECT_EQ(r0.exit_code, 1) << r0.err;
  EXPECT_NE(r0.err.find("[fsdpp-run] node 0: restart 1 of the job: a node did not come back: node 1 (its "
                        "launcher is gone: no heartbeat for"),
            std::string::npos)
      << r0.err;
  EXPECT_LT(r0.seconds, 15);
}

TEST(LauncherMultiNode, DisagreeingRestartsAreRejected) {
  const int port = free_port();
  Process n0(plus(node_flags(0, 2, 1, port), {"--max-restarts", "1", kProbe, "exit", "0"}), {});
  Process n1(plus(node_flags(1, 2, 1, port), {kProbe, "exit", "0"}), {});
  for (Process* p : {&n0, &n1}) {
    const Result r = p->wait(20s);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("the nodes disagree: node 0 has --max-restarts 1, node 1"), std::string::npos) << r.err;
  }
}
