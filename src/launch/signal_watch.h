#pragma once
// The launcher's signals, read from a signalfd instead of handlers: no global state, and a signal
// is just one more fd in the supervision loop's poll().

#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "pipe.h"

namespace fsdpp::launch {

class SignalWatch {
 public:
  // Blocks SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD in the calling thread and opens a signalfd
  // for them; ignores SIGPIPE so that a closed stdout does not kill the launcher (and orphan its
  // workers). Throws LaunchError.
  SignalWatch();
  // Restores the signal mask and SIGPIPE's disposition.
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  int fd() const { return fd_.get(); }

  // The mask before construction: a worker restores it before exec.
  const sigset_t& original_mask() const { return original_mask_; }

  // Every signal pending now, in arrival order, SIGCHLD included; never blocks.
  std::vector<int> take();

  // Waits up to `timeout` for a signal other than SIGCHLD and returns it (0: none came). The
  // SIGCHLDs it takes are dropped: for callers with no worker left to reap, or that reap by
  // polling waitpid() anyway.
  int wait_for_signal(std::chrono::milliseconds timeout);

 private:
  UniqueFd fd_;
  sigset_t original_mask_;
  struct sigaction original_sigpipe_;
};

// "SIGKILL" for 9; "no name" for a number without one.
std::string signal_name(int signal);

}  // namespace fsdpp::launch
