#pragma once
// A timeline of one rank's profiled steps, written as a Chrome trace (the JSON that Perfetto,
// ui.perfetto.dev, and chrome://tracing open): what the trainer did, each FSDP unit's forward
// and backward, each collective from the moment its group's queue started it to its
// completion, and the time the caller blocked in Work::wait. docs/observability.md#timeline-traces.
//
//   auto trace = std::make_shared<TraceRecorder>(TraceOptions{rank, {10, 11}, "runs/x/traces"});
//   world->set_trace(trace);        // every group of the world records into it
//   for (step = 1; ...) {
//     trace->begin_step(step);      // records only while a profiled step runs
//     { TraceSpan s(trace.get(), "optimizer"); opt.step(); }
//     trace->end_step(step);        // writes <dir>/rank<R>.trace.json after the last one
//   }
//
// One recorder per rank, held explicitly (the World, its process groups and the FSDP units that
// communicate over them share it): no global state. Off costs one predictable branch per event
// site: a null pointer, or `active()` (a relaxed atomic load) false outside profiled steps.
//
// Events are complete events ("ph": "X", microseconds of the steady clock, which all processes
// of one host share, so ranks line up when merged); pid is the global rank, tid a track: one
// per recording thread ("main" for the first) and one per process group ("comm default").
// Events of one track nest or are disjoint. scripts/merge_traces.py joins the ranks' files.
//
// A program that uses the library directly sets FSDPP_PROFILE_STEPS=10,11 (and FSDPP_TRACE_DIR,
// default ./traces): init_from_env gives the World a recorder whose steps are counted by the
// FSDP root's training forwards (auto_step), unless someone calls begin_step itself.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

namespace fsdpp::dist {

struct CommCounters;

struct TraceOptions {
  int rank = 0;                  // the global rank: the trace's pid
  std::vector<int64_t> steps;    // the steps to record (1-based, as the trainer counts)
  std::filesystem::path dir;     // rank<R>.trace.json goes here (made if missing)
};

// One "args" entry of an event.
struct TraceArg {
  std::string key;
  std::variant<int64_t, double, std::string> value;
};

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  explicit TraceRecorder(TraceOptions options);
  // Writes what a profiled step left unwritten (a run that ended inside one); never throws.
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // FSDPP_PROFILE_STEPS ("10,11", "10-12" or a mix) and FSDPP_TRACE_DIR; nullptr when the first
  // is unset or empty. A malformed list is a ConfigError naming the variable.
  static std::shared_ptr<TraceRecorder> from_env(int rank);
  // "10,11,20-22" -> {10, 11, 20, 21, 22}; throws ConfigError naming `what` otherwise.
  static std::vector<int64_t> parse_steps(std::string_view text, std::string_view what);

  // Whether events are being recorded now: the check every event site makes first.
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // The trainer's step boundaries. begin_step starts recording when `step` is profiled;
  // end_step records the step's own event ("step 10", from begin_step to `end` or now) and,
  // after the last profiled step, writes the file. Calling them turns auto_step off.
  void begin_step(int64_t step);
  // `args` go on the step's event (the trainer's per-kind collective counts).
  void end_step(int64_t step, std::optional<Clock::time_point> end = std::nullopt,
                std::vector<TraceArg> args = {});
  // For programs without a trainer: the FSDP root calls it at each training forward. A no-op
  // once begin_step was called.
  void auto_step();

  // A track for the calling thread ("main" for the first that records, "thread 2", ...).
  int thread_track();
  // A track by name, made on first use ("comm default").
  int named_track(const std::string& name);

  // A complete event on `track` from `begin` to `end`. Recorded only while active(); callers
  // check active() first so that building `args` costs nothing when off.
  void complete(int track, std::string name, Clock::time_point begin, Clock::time_point end,
                std::vector<TraceArg> args = {});

  // Writes the file now (what is recorded so far); returns its path. Throws Error when it
  // cannot be written.
  std::filesystem::path write();
  std::filesystem::path path() const;
  const std::vector<int64_t>& steps() const { return options_.steps; }
  // The directory, before anything is written (the trainer's output_dir/traces).
  void set_dir(std::filesystem::path dir);

 private:
  struct Event {
    int track;
    std::string name;
    int64_t ts_us;
    int64_t dur_us;
    std::vector<TraceArg> args;
  };
  bool profiled(int64_t step) const;

  TraceOptions options_;
  int64_t last_step_ = 0;  // the largest profiled step
  std::atomic<bool> active_{false};
  std::atomic<bool> driven_{false};  // begin_step was called: auto_step does nothing
  std::mutex mutex_;
  std::vector<Event> events_;
  std::map<std::thread::id, int> thread_tracks_;
  std::vector<std::string> track_names_;  // by track id
  int64_t current_step_ = 0;
  Clock::time_point step_begin_{};
  int64_t auto_count_ = 0;
  bool written_ = false;
  bool dirty_ = false;  // events recorded since the last write
};

// Per kind of collective with any calls: {"calls_all_gather", n}, {"bytes_all_gather", b}, ...
std::vector<TraceArg> counter_args(const CommCounters& counters);

// Records [construction, end() or destruction) as one event on the calling thread's track,
// when `trace` is non-null and active at construction.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* trace, const char* name)
      : trace_(trace != nullptr && trace->active() ? trace : nullptr), name_(name) {
    if (trace_ != nullptr) begin_ = TraceRecorder::Clock::now();
  }
  ~TraceSpan() { end(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  void end() {
    if (trace_ == nullptr) return;
    trace_->complete(trace_->thread_track(), name_, begin_, TraceRecorder::Clock::now());
    trace_ = nullptr;
  }

 private:
  TraceRecorder* trace_;
  const char* name_;
  TraceRecorder::Clock::time_point begin_{};
};

}  // namespace fsdpp::dist
