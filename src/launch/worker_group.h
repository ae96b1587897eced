#pragma once
// Supervision of one node's workers for one attempt: spawn, relay output, notice exits, stop.
// Knows nothing of flags, ranks' meaning or restarts; run() (and later a rendezvous between the
// launchers of several nodes) decides what to start and what to do when it ends.

#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/launch/launcher.h"
#include "output_relay.h"
#include "pipe.h"
#include "signal_watch.h"

namespace fsdpp::launch {

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  EnvVars env;                    // set on top of the launcher's environment
};

// How a worker ended.
struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int status = 0;  // as from waitpid()
  double stopped_s = 0;  // > 0: did not exit, but was stopped that long (status: the stop)
  double silent_s = 0;   // > 0: did not exit, but wrote no heartbeat for that long
  std::string last_beat;  // with silent_s: what its last heartbeat said

  bool ok() const;
  // Declared failed while its process still ran (stopped, or silent): stop() still signals it.
  bool still_running() const { return stopped_s > 0 || silent_s > 0; }
  // "rank 1 (local 1, pid 1234) exited with code 3" or "... was killed by signal 9 (SIGKILL)".
  std::string describe() const;
  // Exited with code 2, a usage or configuration error (fsdpp-train's ConfigError, fsdpp-run's
  // own kExitUsage, argparse's): a restart would run the same command into the same error.
  bool configuration_error() const { return stopped_s == 0 && silent_s == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 2; }
};

struct OutputOptions {
  bool prefix = true;                            // "[rank R] " before each line
  std::optional<std::filesystem::path> log_dir;  // also write <log_dir>/rank<R>.log
  // A worker stopped (SIGSTOP, SIGTSTP, a debugger) for longer than this counts as failed: a
  // stopped process never exits and never errs, and its peers may all be waiting on it.
  std::chrono::milliseconds stopped_limit{600'000};
  // > 0: each worker gets FSDPP_HEARTBEAT_FILE, and one whose file has not been written for this
  // long (after its first write) counts as failed: it is running but not making progress.
  std::chrono::milliseconds progress_limit{0};
};

class WorkerGroup {
 public:
  // kExternal: the fd given to watch() became readable (another node of the job failed).
  enum class Outcome { kSucceeded, kWorkerFailed, kInterrupted, kExternal };
  struct WaitResult {
    Outcome outcome = Outcome::kSucceeded;
    std::optional<WorkerExit> failure;  // kWorkerFailed: the first worker seen to fail
    int signal = 0;                     // kInterrupted: the signal the launcher received
  };
  struct StopResult {
    int signalled = 0;  // workers still running when the stop began
    int killed = 0;     // of those, still running after the grace period: SIGKILLed
    // A signal the launcher received while stopping; it cut the grace period short.
    int interrupt_signal = 0;
  };

  // `signals` must outlive the group.
  WorkerGroup(SignalWatch& signals, OutputOptions output);
  // SIGKILLs and reaps whatever still runs; never throws.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts one worker per spec, each in its own process group. Throws LaunchError if one cannot
  // be started (e.g. exec fails), after killing those already started.
  void start(const std::vector<WorkerSpec>& specs);

  // Relays output until all workers exited 0, one failed, or the launcher got a signal. No
  // deadline of its own: a job runs as long as it runs, and the workers' collectives are bounded
  // by their own timeout (FSDPP_TIMEOUT_S), so a hung rank ends up as a failed worker.
  WaitResult wait();

  // Sends `signal` to every worker's process group, waits up to `grace` for the workers to exit,
  // SIGKILLs the groups (which also ends grandchildren that outlived their worker), reaps every
  // worker and relays the last output. A second signal to the launcher ends the grace at once.
  StopResult stop(int signal, std::chrono::milliseconds grace);

  int running() const;

  // After a successful attempt: what the workers left behind, in their process groups
  // (background children) or outside them (children that called setsid, found as the
  // launcher's descendants: descendants.h), gets SIGTERM, then SIGKILL after `grace`.
  struct Leftovers {
    int groups = 0;   // workers' process groups that had a live member
    int outside = 0;  // live descendants outside every worker's group
  };
  Leftovers stop_leftovers(std::chrono::milliseconds grace);

  // "; rank 0 (pid 12) was stopped (SIGSTOP) for 3.2 s" for every worker stopped right now:
  // the likely cause when its peers time out.
  std::string stopped_note() const;

  // Makes wait() also return kExternal once `fd` is readable (-1: nothing to watch). The fd is
  // borrowed and must outlive the group.
  void watch(int fd) { external_fd_ = fd; }

 private:
  struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;
    bool running = false;
    int status = 0;
    OutputRelay out;
    OutputRelay err;
    std::optional<std::chrono::steady_clock::time_point> stopped_since;
    int stop_signal = 0;
  };

  Worker spawn(const WorkerSpec& spec);
  // FSDPP_HEARTBEAT_FILE of `rank` (the directory is made on first use).
  std::filesystem::path heartbeat_file(int rank);
  // A running, unstopped worker whose heartbeat is older than progress_limit.
  std::optional<WorkerExit> silent_worker() const;
  int log_fd(int rank);
  // Waits up to `timeout` for output, an exit or a signal and handles what came.
  void pump(std::chrono::milliseconds timeout);
  void reap();
  // `signal` to every worker's process group and to the launcher's other descendants.
  void signal_groups(int signal);
  std::vector<pid_t> worker_pids() const;
  // Relays what is left in the pipes, waiting at most `limit` for writers (grandchildren) to close.
  void drain(std::chrono::milliseconds limit);

  SignalWatch& signals_;
  OutputOptions output_;
  std::filesystem::path heartbeat_dir_;  // with progress_limit: one file per rank
  std::map<int, UniqueFd> logs_;  // by rank; kept across attempts so a restart appends
  std::vector<Worker> workers_;
  std::optional<WorkerExit> first_failure_;
  int pending_signal_ = 0;  // first signal received and not yet acted on
  bool stopping_ = false;   // exits during stop() are expected, not failures
  int external_fd_ = -1;
  bool external_ready_ = false;  // external_fd_ was readable; it is not polled again
};

}  // namespace fsdpp::launch
