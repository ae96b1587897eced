// A stand-in worker for fsdpp-run's tests: no torch, one behaviour per mode.
//
//   probe env                           print the launcher's variables as KEY=VALUE lines
//   probe exit CODE [DELAY_MS]          exit with CODE after DELAY_MS
//   probe lines N                       N lines "out I" on stdout and "err I" on stderr, then
//                                       "tail" on stdout without a newline
//   probe sleep                         wait for a signal (at most 60 s, then exit 99)
//   probe fail-rank R CODE [DELAY_MS]   rank R exits with CODE after DELAY_MS (default 300);
//                                       the other ranks behave as `sleep`
//   probe signal-rank R SIG [DELAY_MS]  rank R sends itself signal SIG; the others `sleep`
//   probe fail-until K CODE             exit CODE while FSDPP_RESTART_COUNT < K, else print
//                                       "ok attempt N" and exit 0
//   probe sleep-until K                 `sleep` while FSDPP_RESTART_COUNT < K, else print
//                                       "ok attempt N" and exit 0
//
// A sleeping probe writes $PROBE_DIR/pid.<RANK> once its handlers are in place, and on SIGTERM
// (SIGINT) writes $PROBE_DIR/term.<RANK> (int.<RANK>) and exits 0. With PROBE_IGNORE_TERM=1 it
// writes the marker but keeps running. With PROBE_GRANDCHILD=1 it first forks a child that
// ignores SIGTERM and sleeps, and writes that child's pid to $PROBE_DIR/child.<RANK>.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

// Signal handlers can only reach globals: the marker paths, filled in before the handlers.
char g_term_marker[4096];
char g_int_marker[4096];
volatile sig_atomic_t g_ignore_term = 0;

void write_marker(const char* path) {
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) ::close(fd);
}

void on_signal(int sig) {
  write_marker(sig == SIGTERM ? g_term_marker : g_int_marker);
  if (sig == SIGTERM && g_ignore_term) return;
  ::_exit(0);
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

int rank() { return std::atoi(env_or("RANK", "-1").c_str()); }

std::string probe_file(const std::string& name) {
  return env_or("PROBE_DIR", ".") + "/" + name + "." + std::to_string(rank());
}

// Written under a temporary name and renamed, so a reader never sees a half-written pid.
void write_pid_file(const std::string& name, pid_t pid) {
  const std::string path = probe_file(name);
  const std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%d\n", static_cast<int>(pid));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

void sleep_ms(long ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

[[noreturn]] void sleep_until_signalled() {
  std::snprintf(g_term_marker, sizeof g_term_marker, "%s", probe_file("term").c_str());
  std::snprintf(g_int_marker, sizeof g_int_marker, "%s", probe_file("int").c_str());
  g_ignore_term = env_or("PROBE_IGNORE_TERM", "0") == "1";
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);

  if (env_or("PROBE_GRANDCHILD", "0") == "1") {
    const pid_t child = ::fork();
    if (child == 0) {
      ::signal(SIGTERM, SIG_IGN);
      ::signal(SIGINT, SIG_IGN);
      sleep_ms(60'000);
      ::_exit(0);
    }
    write_pid_file("child", child);
  }
  write_pid_file("pid", ::getpid());
  std::printf("ready\n");
  std::fflush(stdout);
  // Bounded, so that a launcher bug cannot leave probes running for ever.
  sleep_ms(60'000);
  std::exit(99);
}

int usage() {
  std::fprintf(stderr, "probe: unknown or incomplete mode; see the comment in probe.cpp\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto arg = [&](int i, long fallback) { return argc > i ? std::atol(argv[i]) : fallback; };

  if (mode == "env") {
    for (const char* key : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                            "NODE_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "FSDPP_TIMEOUT_S", "FSDPP_RESTART_COUNT", "FSDPP_AGENT_STORE", "FSDPP_LAUNCHER",
                            "OMP_NUM_THREADS"}) {
      std::printf("%s=%s\n", key, env_or(key, "<unset>").c_str());
    }
    return 0;
  }
  if (mode == "exit" && argc > 2) {
    sleep_ms(arg(3, 0));
    return static_cast<int>(arg(2, 0));
  }
  if (mode == "lines" && argc > 2) {
    for (long i = 0; i < arg(2, 0); ++i) {
      std::printf("out %ld\n", i);
      std::fprintf(stderr, "err %ld\n", i);
    }
    std::printf("tail");
    return 0;
  }
  if (mode == "sleep") sleep_until_signalled();
  if ((mode == "fail-rank" || mode == "signal-rank") && argc > 3) {
    if (rank() != arg(2, -1)) sleep_until_signalled();
    sleep_ms(arg(4, 300));
    if (mode == "signal-rank") ::kill(::getpid(), static_cast<int>(arg(3, 0)));
    std::printf("rank %d failing\n", rank());
    return static_cast<int>(arg(3, 0));
  }
  if (mode == "sleep-until" && argc > 2) {
    const long attempt = std::atol(env_or("FSDPP_RESTART_COUNT", "0").c_str());
    if (attempt < arg(2, 0)) sleep_until_signalled();
    std::printf("ok attempt %ld\n", attempt);
    return 0;
  }
  if (mode == "fail-until" && argc > 3) {
    const long attempt = std::atol(env_or("FSDPP_RESTART_COUNT", "0").c_str());
    if (attempt < arg(2, 0)) {
      std::fprintf(stderr, "failing attempt %ld\n", attempt);
      return static_cast<int>(arg(3, 0));
    }
    std::printf("ok attempt %ld\n", attempt);
    return 0;
  }
  return usage();
}
