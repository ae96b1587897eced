#include "descendants.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace fsdpp::launch {
namespace {

using Clock = std::chrono::steady_clock;

struct ProcInfo {
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = 0;
  bool live() const { return state != 'Z' && state != 'X'; }
};

// Every process's parent, process group and state, from /proc/<pid>/stat.
std::map<pid_t, ProcInfo> process_table() {
  std::map<pid_t, ProcInfo> table;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so parse after the
    // last ')'.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    ProcInfo info;
    long ppid = 0, pgrp = 0;
    if (!(rest >> info.state >> ppid >> pgrp)) continue;
    info.ppid = static_cast<pid_t>(ppid);
    info.pgrp = static_cast<pid_t>(pgrp);
    table[static_cast<pid_t>(std::stol(name))] = info;
  }
  return table;
}

bool contains(const std::vector<pid_t>& pids, pid_t pid) {
  return std::find(pids.begin(), pids.end(), pid) != pids.end();
}

}  // namespace

bool group_has_live_member(pid_t pgid) {
  if (::kill(-pgid, 0) != 0) return false;
  const auto table = process_table();
  return std::any_of(table.begin(), table.end(),
                     [&](const auto& p) { return p.second.pgrp == pgid && p.second.live(); });
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0; }

std::vector<pid_t> live_descendants() {
  const auto table = process_table();
  std::vector<pid_t> out, frontier{::getpid()};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& [pid, info] : table) {
      if (info.ppid != parent) continue;
      frontier.push_back(pid);
      if (info.live()) out.push_back(pid);
    }
  }
  return out;
}

void reap_adopted(const std::vector<pid_t>& workers) {
  for (;;) {
    siginfo_t info{};
    // Look without reaping: a worker's exit is the worker group's to collect.
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (contains(workers, info.si_pid)) return;
    ::waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

void signal_descendants(int signal, const std::vector<pid_t>& skip_groups) {
  for (pid_t pid : live_descendants()) {
    if (!contains(skip_groups, ::getpgid(pid))) ::kill(pid, signal);
  }
}

int stop_descendants(std::chrono::milliseconds grace, const std::vector<pid_t>& workers) {
  const auto found = live_descendants();
  if (found.empty()) return 0;
  signal_descendants(SIGTERM, workers);
  signal_descendants(SIGCONT, workers);
  const auto deadline = Clock::now() + grace;
  while (!live_descendants().empty() && Clock::now() < deadline) {
    reap_adopted(workers);
    ::usleep(20'000);
  }
  signal_descendants(SIGKILL, {});
  // SIGKILL'd processes die at once unless stuck in the kernel; give them a moment to.
  const auto kill_deadline = Clock::now() + std::chrono::seconds(2);
  while (!live_descendants().empty() && Clock::now() < kill_deadline) ::usleep(10'000);
  reap_adopted(workers);
  return static_cast<int>(found.size());
}

}  // namespace fsdpp::launch
