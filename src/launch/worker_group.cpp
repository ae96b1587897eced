#include "worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "descendants.h"

extern char** environ;

namespace fsdpp::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Upper bound on one poll(): exits are also noticed through SIGCHLD, this is only a backstop.
constexpr milliseconds kPollInterval{200};
// A forked child does a few syscalls before exec; anything slower means something is wrong.
constexpr milliseconds kExecTimeout{10'000};
// SIGKILL cannot be caught, but a process stuck in the kernel (D state) can take a while to die.
constexpr milliseconds kKillTimeout{10'000};
// How long to keep reading pipes after their workers exited: only grandchildren that inherited
// the worker's stdout keep them open that long.
constexpr milliseconds kDrainLimit{500};

std::vector<std::string> merged_environment(const EnvVars& overrides) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view key = text.substr(0, text.find('='));
    const bool overridden = std::any_of(overrides.begin(), overrides.end(),
                                        [&](const auto& kv) { return kv.first == key; });
    if (!overridden) env.emplace_back(text);
  }
  for (const auto& [key, value] : overrides) env.push_back(key + "=" + value);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

bool WorkerExit::ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string WorkerExit::describe() const {
  const std::string who = fmt::format("rank {} (local {}, pid {})", rank, local_rank, pid);
  if (silent_s > 0) {
    return fmt::format("{} made no progress for {:.1f} s (no heartbeat; its last one said '{}'; "
                       "fsdpp-run --progress-timeout-s): it is running but stuck",
                       who, silent_s, last_beat);
  }
  if (stopped_s > 0) {
    const int sig = WIFSTOPPED(status) ? WSTOPSIG(status) : SIGSTOP;
    return fmt::format("{} has been stopped by signal {} ({}) for {:.1f} s (a frozen process never "
                       "exits on its own; its peers cannot go on without it)",
                       who, sig, signal_name(sig), stopped_s);
  }
  if (WIFEXITED(status)) return fmt::format("{} exited with code {}", who, WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("{} was killed by signal {} ({}){}", who, sig, signal_name(sig),
                       WCOREDUMP(status) ? ", core dumped" : "");
  }
  return fmt::format("{} ended with wait status {:#x}", who, status);
}

WorkerGroup::WorkerGroup(SignalWatch& signals, OutputOptions output)
    : signals_(signals), output_(std::move(output)) {}

WorkerGroup::~WorkerGroup() {
  if (running() > 0) {
    try {
      stop(SIGKILL, milliseconds{0});
    } catch (...) {
      // Destructors never throw; stop() only throws if printing fails.
    }
  }
  if (!heartbeat_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(heartbeat_dir_, ec);
  }
}

int WorkerGroup::running() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; }));
}

void WorkerGroup::start(const std::vector<WorkerSpec>& specs) {
  if (running() > 0) {
    throw LaunchError("[fsdpp-run] start() called while workers of the last attempt still run");
  }
  workers_.clear();
  first_failure_.reset();
  external_ready_ = false;  // a new round (multi-node restarts): the watched fd was drained
  stopping_ = false;
  workers_.reserve(specs.size());
  try {
    for (const WorkerSpec& spec : specs) workers_.push_back(spawn(spec));
  } catch (...) {
    stop(SIGKILL, milliseconds{0});
    throw;
  }
}

WorkerGroup::Worker WorkerGroup::spawn(const WorkerSpec& spec) {
  if (spec.argv.empty()) throw LaunchError("[fsdpp-run] a worker needs a program to run");
  // Everything the child needs is built before fork(): after it, the child may only make
  // async-signal-safe calls (no allocation).
  std::vector<std::string> args = spec.argv;
  EnvVars vars = spec.env;
  if (output_.progress_limit.count() > 0) {
    const auto beat = heartbeat_file(spec.rank);
    std::error_code ec;
    std::filesystem::remove(beat, ec);  // a restart starts counting afresh
    vars.emplace_back("FSDPP_HEARTBEAT_FILE", beat.string());
  }
  std::vector<std::string> env = merged_environment(vars);
  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(env);
  const sigset_t* original_mask = &signals_.original_mask();
  const int log = log_fd(spec.rank);
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  Pipe exec_error = make_pipe();
  const pid_t launcher = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    throw LaunchError(
        fmt::format("[fsdpp-run] cannot fork rank {}: {}", spec.rank, std::strerror(errno)));
  }
  if (pid == 0) {
    // Own process group: the launcher stops the worker and all its children with kill(-pid).
    ::setpgid(0, 0);
    // Die with the launcher even if it is SIGKILLed and cannot stop us itself.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(127);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &default_action, nullptr);
    ::sigprocmask(SIG_SETMASK, original_mask, nullptr);
    // Workers are not in the terminal's foreground group: reading the terminal would stop them.
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0 && ::dup2(devnull, STDIN_FILENO) >= 0 &&
        ::dup2(out.write.get(), STDOUT_FILENO) >= 0 &&
        ::dup2(err.write.get(), STDERR_FILENO) >= 0) {
      ::execvpe(argv[0], argv.data(), envp.data());
    }
    const int error = errno;
    [[maybe_unused]] ssize_t n = ::write(exec_error.write.get(), &error, sizeof error);
    ::_exit(127);
  }

  // Also here, racing the child's own call, so that kill(-pid) works from this moment on. (It
  // fails harmlessly with EACCES if the child has already exec'd.)
  ::setpgid(pid, pid);
  out.write.reset();
  err.write.reset();
  exec_error.write.reset();

  // The exec-error pipe is close-on-exec: EOF means exec succeeded, an int is exec's errno.
  pollfd p{exec_error.read.get(), POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, static_cast<int>(kExecTimeout.count()));
  } while (ready < 0 && errno == EINTR);
  int error = 0;
  const ssize_t n = ready > 0 ? ::read(exec_error.read.get(), &error, sizeof error) : -1;
  if (n != 0) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);  // it is dying (SIGKILL or _exit) and cannot block us long
    if (n == static_cast<ssize_t>(sizeof error)) {
      throw LaunchError(fmt::format("[fsdpp-run] cannot execute '{}': {}", spec.argv[0],
                                    std::strerror(error)));
    }
    throw LaunchError(fmt::format("[fsdpp-run] rank {} did not reach exec within {} ms",
                                  spec.rank, kExecTimeout.count()));
  }

  const std::string prefix = output_.prefix ? fmt::format("[rank {}] ", spec.rank) : "";
  return Worker{spec, pid, true, 0,
                OutputRelay(std::move(out.read), STDOUT_FILENO, prefix, log),
                OutputRelay(std::move(err.read), STDERR_FILENO, prefix, log)};
}

int WorkerGroup::log_fd(int rank) {
  if (!output_.log_dir) return -1;
  auto it = logs_.find(rank);
  if (it == logs_.end()) {
    const auto path = *output_.log_dir / fmt::format("rank{}.log", rank);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
    if (!fd) {
      throw LaunchError(fmt::format("[fsdpp-run] cannot open log file '{}': {}", path.string(),
                                    std::strerror(errno)));
    }
    it = logs_.emplace(rank, std::move(fd)).first;
  }
  return it->second.get();
}

WorkerGroup::WaitResult WorkerGroup::wait() {
  for (;;) {
    if (pending_signal_ != 0) {
      return {Outcome::kInterrupted, std::nullopt, std::exchange(pending_signal_, 0)};
    }
    if (first_failure_) return {Outcome::kWorkerFailed, first_failure_, 0};
    if (running() == 0) {
      drain(kDrainLimit);
      return {Outcome::kSucceeded, std::nullopt, 0};
    }
    if (external_ready_) return {Outcome::kExternal, std::nullopt, 0};
    if (auto silent = silent_worker()) return {Outcome::kWorkerFailed, silent, 0};
    for (const Worker& w : workers_) {
      if (!w.running || !w.stopped_since) continue;
      const auto stopped = Clock::now() - *w.stopped_since;
      if (stopped >= output_.stopped_limit) {
        WorkerExit e{w.spec.rank, w.spec.local_rank, w.pid, w.status};
        e.stopped_s = std::chrono::duration<double>(stopped).count();
        return {Outcome::kWorkerFailed, e, 0};
      }
    }
    pump(kPollInterval);
  }
}

WorkerGroup::StopResult WorkerGroup::stop(int signal, milliseconds grace) {
  stopping_ = true;
  StopResult result;
  result.signalled = running();
  signal_groups(signal);
  // A stopped worker would hold the signal pending until the grace ran out.
  if (signal != SIGKILL) signal_groups(SIGCONT);
  const auto deadline = Clock::now() + grace;
  while (running() > 0 && pending_signal_ == 0 && Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    pump(std::clamp(left, milliseconds{1}, kPollInterval));
  }
  result.interrupt_signal = std::exchange(pending_signal_, 0);
  result.killed = running();
  // Always, even when every worker exited in time: their children may still be alive. A group
  // whose members are all gone gives ESRCH. (Its id could only be reused by a new group leader
  // within these few seconds, which the kernel's pid allocation makes practically impossible.)
  signal_groups(SIGKILL);
  const auto kill_deadline = Clock::now() + kKillTimeout;
  while (running() > 0 && Clock::now() < kill_deadline) pump(kPollInterval);
  for (const Worker& w : workers_) {
    if (w.running) {
      fmt::print(stderr, "[fsdpp-run] rank {} (pid {}) is still alive {} ms after SIGKILL\n",
                 w.spec.rank, w.pid, kKillTimeout.count());
    }
  }
  drain(kDrainLimit);
  if (result.interrupt_signal == 0) result.interrupt_signal = std::exchange(pending_signal_, 0);
  return result;
}

std::filesystem::path WorkerGroup::heartbeat_file(int rank) {
  if (heartbeat_dir_.empty()) {
    char tmpl[] = "/tmp/fsdpp-run-heartbeat-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      throw LaunchError(fmt::format("[fsdpp-run] cannot create a directory for heartbeats: {}",
                                    std::strerror(errno)));
    }
    heartbeat_dir_ = tmpl;
  }
  return heartbeat_dir_ / fmt::format("rank{}", rank);
}

std::optional<WorkerExit> WorkerGroup::silent_worker() const {
  if (output_.progress_limit.count() <= 0 || heartbeat_dir_.empty()) return std::nullopt;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const Worker& w : workers_) {
    if (!w.running || w.stopped_since) continue;  // a stopped worker is reported as such
    const auto path = heartbeat_dir_ / fmt::format("rank{}", w.spec.rank);
    std::error_code ec;
    const auto written = std::filesystem::last_write_time(path, ec);
    if (ec) continue;  // no heartbeat yet: it is still setting up
    const auto silent = std::chrono::duration_cast<milliseconds>(now - written);
    if (silent < output_.progress_limit) continue;
    WorkerExit e{w.spec.rank, w.spec.local_rank, w.pid, w.status};
    e.silent_s = std::chrono::duration<double>(silent).count();
    std::ifstream in(path);
    std::getline(in, e.last_beat);
    return e;
  }
  return std::nullopt;
}

WorkerGroup::Leftovers WorkerGroup::stop_leftovers(milliseconds grace) {
  Leftovers left;
  std::vector<pid_t> groups;
  for (const Worker& w : workers_) {
    if (w.pid > 0 && group_has_live_member(w.pid)) groups.push_back(w.pid);
  }
  left.groups = static_cast<int>(groups.size());
  // Descendants outside every worker's group called setsid() (descendants.h).
  for (pid_t pid : live_descendants()) {
    if (std::find(groups.begin(), groups.end(), ::getpgid(pid)) == groups.end()) ++left.outside;
  }
  if (left.groups == 0 && left.outside == 0) return left;
  for (pid_t g : groups) ::kill(-g, SIGTERM);
  for (pid_t g : groups) ::kill(-g, SIGCONT);
  stop_descendants(grace, worker_pids());
  for (pid_t g : groups) ::kill(-g, SIGKILL);
  return left;
}

std::vector<pid_t> WorkerGroup::worker_pids() const {
  std::vector<pid_t> pids;
  for (const Worker& w : workers_) pids.push_back(w.pid);
  return pids;
}

std::string WorkerGroup::stopped_note() const {
  std::string out;
  for (const Worker& w : workers_) {
    if (!w.stopped_since) continue;
    const int sig = WIFSTOPPED(w.status) ? WSTOPSIG(w.status) : SIGSTOP;
    out += fmt::format("; rank {} (pid {}) was stopped by {} for {:.1f} s", w.spec.rank, w.pid,
                       signal_name(sig),
                       std::chrono::duration<double>(Clock::now() - *w.stopped_since).count());
  }
  return out;
}

void WorkerGroup::signal_groups(int signal) {
  for (const Worker& w : workers_) {
    if (w.pid > 0) ::kill(-w.pid, signal);
  }
  signal_descendants(signal, worker_pids());  // and what left the groups (setsid)
}

void WorkerGroup::pump(milliseconds timeout) {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  // Level-triggered and never read here: once seen, polling it again would spin.
  const bool watch_external = external_fd_ >= 0 && !external_ready_;
  if (watch_external) fds.push_back({external_fd_, POLLIN, 0});
  const size_t first_relay = fds.size();
  std::vector<OutputRelay*> relays;
  for (Worker& w : workers_) {
    for (OutputRelay* relay : {&w.out, &w.err}) {
      if (!relay->is_open()) continue;
      fds.push_back({relay->fd(), POLLIN, 0});
      relays.push_back(relay);
    }
  }
  if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) > 0) {
    if (fds[0].revents != 0) {
      for (int s : signals_.take()) {
        if (s != SIGCHLD && pending_signal_ == 0) pending_signal_ = s;
      }
    }
    if (watch_external && fds[1].revents != 0) external_ready_ = true;
    for (size_t i = 0; i < relays.size(); ++i) {
      if (fds[first_relay + i].revents != 0) relays[i]->read_some();
    }
  }
  reap();
}

void WorkerGroup::reap() {
  bool set_in_this_pass = false;
  for (Worker& w : workers_) {
    if (!w.running) continue;
    int status = 0;
    const pid_t r = ::waitpid(w.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (r == 0) continue;
    if (r > 0 && WIFSTOPPED(status)) {
      if (!w.stopped_since) w.stopped_since = Clock::now();
      w.status = status;
      continue;
    }
    if (r > 0 && WIFCONTINUED(status)) {
      w.stopped_since.reset();
      continue;
    }
    if (r < 0) status = 0;  // ECHILD: someone else reaped it; nothing more to learn
    w.running = false;
    w.status = status;
    const WorkerExit exit{w.spec.rank, w.spec.local_rank, w.pid, status};
    if (stopping_ || exit.ok()) continue;
    // Of failures seen in the same pass, one killed by a signal is the likelier cause: a rank
    // killed mid-collective makes its peers exit with an error a moment later.
    if (!first_failure_ ||
        (set_in_this_pass && !WIFSIGNALED(first_failure_->status) && WIFSIGNALED(status))) {
      first_failure_ = exit;
      set_in_this_pass = true;
    }
  }
  reap_adopted(worker_pids());  // orphans re-parented to the launcher that exited
}

void WorkerGroup::drain(milliseconds limit) {
  const auto any_open = [&] {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.out.is_open() || w.err.is_open(); });
  };
  const auto deadline = Clock::now() + limit;
  while (any_open() && Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    pump(std::clamp(left, milliseconds{1}, kPollInterval));
  }
  for (Worker& w : workers_) {
    w.out.close();
    w.err.close();
  }
}

}  // namespace fsdpp::launch
