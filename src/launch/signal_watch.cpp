#include "signal_watch.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "fsdpp/launch/launcher.h"

namespace fsdpp::launch {

SignalWatch::SignalWatch() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&mask, s);
  if (int rc = ::pthread_sigmask(SIG_BLOCK, &mask, &original_mask_); rc != 0) {
    throw LaunchError(fmt::format("[fsdpp-run] cannot block signals: {}", std::strerror(rc)));
  }
  fd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) {
    const int err = errno;
    ::pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
    throw LaunchError(fmt::format("[fsdpp-run] cannot open a signalfd: {}", std::strerror(err)));
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &original_sigpipe_);
}

SignalWatch::~SignalWatch() {
  ::sigaction(SIGPIPE, &original_sigpipe_, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
}

std::vector<int> SignalWatch::take() {
  std::vector<int> signals;
  signalfd_siginfo info;
  while (::read(fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    signals.push_back(static_cast<int>(info.ssi_signo));
  }
  return signals;
}

int SignalWatch::wait_for_signal(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    for (int s : take()) {
      if (s != SIGCHLD) return s;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    pollfd p{fd_.get(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return fmt::format("SIG{}", abbrev);
  return "no name";
}

}  // namespace fsdpp::launch
