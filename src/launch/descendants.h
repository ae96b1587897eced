#pragma once
// The processes a job leaves behind outside its workers' process groups.
//
// fsdpp-run stops a worker and its children with kill(-pgid). A child that called setsid() (a
// daemon, `setsid cmd &`) left that group, and once its worker exits it is re-parented to init
// and outlives the job. fsdpp-run therefore makes itself a child subreaper
// (prctl(PR_SET_CHILD_SUBREAPER), as systemd and tini do): orphans of its workers are
// re-parented to it instead, stay its descendants in /proc, and are stopped with the job. It
// reaps the ones that exit on their own (reap_adopted), so none stays a zombie.

#include <sys/types.h>

#include <chrono>
#include <vector>

namespace fsdpp::launch {

// Whether process group `pgid` has a member that is not a zombie. kill(-pgid, 0) alone also
// finds the zombies that an orphaned child leaves until init reaps it, which can be never in a
// container whose init does not reap.
bool group_has_live_member(pid_t pgid);

// Makes this process a child subreaper for the rest of its life. Returns false (and changes
// nothing) where the kernel does not offer it.
bool become_subreaper();

// Every live (not zombie) descendant of this process, read from /proc.
std::vector<pid_t> live_descendants();

// Reaps the exited children of this process that are not in `workers` (orphans it adopted).
// Never blocks.
void reap_adopted(const std::vector<pid_t>& workers);

// `signal` to every live descendant of this process outside the process groups `skip_groups`
// (the workers' groups, which the caller signals as groups: a second SIGTERM would end a worker
// at once instead of letting it stop at its next step).
void signal_descendants(int signal, const std::vector<pid_t>& skip_groups);

// SIGTERM (and SIGCONT, for a stopped one) to every live descendant outside the groups of
// `workers` (which the caller signalled), SIGKILL to every one alive after `grace`, and reaps
// what it adopted. Returns how many there were.
int stop_descendants(std::chrono::milliseconds grace, const std::vector<pid_t>& workers);

}  // namespace fsdpp::launch
