#pragma once
// The liveness link between the launchers of a multi-node job, over the store they met at
// (rendezvous.h). Each launcher's thread bumps its heartbeat counter every kBeat and reads the
// others'; the first failure anywhere is written to one key that every launcher watches. fd()
// becomes readable when this node must stop because of another: that node reported a failure,
// its launcher went silent for longer than the heartbeat timeout (SIGKILLed, host down), or
// node 0's launcher, which hosts the store, is gone.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pipe.h"
#include "rendezvous.h"
#include "signal_watch.h"

namespace fsdpp::launch {

class NodeLink {
 public:
  enum class State { kRunning, kDone, kFailed, kStopped };
  struct Options {
    int node_rank = 0;
    int nnodes = 1;
    std::string where;  // "addr:port" of the store, for messages
    std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
  };
  // What this launcher knows of another node.
  struct Peer {
    State state = State::kRunning;
    double silent_s = 0;  // since its heartbeat last moved
    bool gone = false;    // silent past the timeout while running
  };

  // Takes over the store of a finished rendezvous and starts the thread. Throws LaunchError.
  NodeLink(Rendezvous rendezvous, Options options);
  // Stops the thread; never throws.
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  // Readable once verdict() is set.
  int fd() const { return event_.get(); }
  // Why this node must stop because of another; empty while there is no reason.
  std::string verdict() const;

  // Records `what` (already naming this node) as the job's failure unless another came first;
  // returns the job's first failure as "node K: ..." text. Never throws (a store that is gone
  // is a failure already reported by verdict()).
  std::string report_failure(const std::string& what);
  void set_state(State state);

  // --max-restarts: the workers of every node start again as round `round` (1, 2, ...): the
  // states and the failure are the new round's, the verdict is cleared. Heartbeats go on.
  void begin_round(int round);
  int round() const;

  // After a failed round: agrees through the store on the next round (the first node to ask moves
  // the job's round on; the others read it), announces this node as ready for it, and waits until
  // every node is. Returns the round, or an error naming the nodes that did not come back within
  // `timeout` (or whose launchers are gone: no heartbeat), or 0 with *signal set when the
  // launcher got a signal meanwhile.
  struct RestartResult {
    int round = 0;
    std::string error;  // non-empty: the job cannot go on
    int signal = 0;
  };
  RestartResult meet_for_restart(std::chrono::milliseconds timeout, SignalWatch& signals);

  // Waits until no other node is running (each is done, failed, stopped, or gone): settled.
  // Else it ends at `deadline` (none: no limit), on a verdict if `stop_on_verdict`, or on a
  // signal to the launcher (not SIGCHLD), which it returns.
  struct WaitResult {
    bool settled = false;
    int signal = 0;
  };
  WaitResult wait_for_peers(std::optional<std::chrono::steady_clock::time_point> deadline,
                            SignalWatch& signals, bool stop_on_verdict);
  std::vector<Peer> peers() const;  // by node rank; this node's entry is meaningless

  static std::chrono::milliseconds beat_interval();

 private:
  void loop();
  void beat();  // one round: throws when the store is gone
  void set_verdict(const std::string& why, int round);  // ignored when `round` is over

  Options options_;
  Rendezvous rdzv_;
  std::unique_ptr<KeyValueStore> thread_store_;  // the thread's own connection
  UniqueFd event_;

  mutable std::mutex mutex_;  // guards everything below, and rdzv_.store's use from the thread
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string verdict_;
  int round_ = 0;
  std::vector<Peer> peers_;
  std::vector<long long> last_beats_;
  std::vector<std::chrono::steady_clock::time_point> last_change_;
  std::thread thread_;
};

const char* to_string(NodeLink::State state);

}  // namespace fsdpp::launch
