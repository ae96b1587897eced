#include "stop_signal.h"

#include <atomic>
#include <cstring>

namespace fsdpp::train::detail {
namespace {

// Written by the handler, read by the training loop: lock-free and async-signal-safe.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int sig) {
  int expected = 0;
  if (!g_received.compare_exchange_strong(expected, sig)) {
    // The second one: the user means it.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

StopSignal::StopSignal() {
  g_received.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // collectives and file writes go on; the loop checks between steps
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGINT, &sa, &old_int_);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
}

int StopSignal::received() const { return g_received.load(); }

}  // namespace fsdpp::train::detail
