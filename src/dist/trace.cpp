#include "fsdpp/dist/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"
#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist {
namespace {

int64_t micros(TraceRecorder::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

bool parse_int(const std::string& s, int64_t& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return end != nullptr && *end == '\0';
}

}  // namespace

TraceRecorder::TraceRecorder(TraceOptions options) : options_(std::move(options)) {
  std::sort(options_.steps.begin(), options_.steps.end());
  options_.steps.erase(std::unique(options_.steps.begin(), options_.steps.end()),
                       options_.steps.end());
  last_step_ = options_.steps.empty() ? 0 : options_.steps.back();
}

TraceRecorder::~TraceRecorder() {
  // A run that ended inside (or before the end of) its profiled steps keeps what it recorded.
  try {
    bool pending = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending = dirty_;
    }
    if (pending) write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  } catch (...) {
  }
}

std::vector<int64_t> TraceRecorder::parse_steps(std::string_view text, std::string_view what) {
  std::vector<int64_t> steps;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (item.empty()) continue;
    int64_t a = 0, b = 0;
    const auto dash = item.find('-', 1);
    const bool ok = dash == std::string::npos
                        ? parse_int(item, a) && (b = a, true)
                        : parse_int(trim(item.substr(0, dash)), a) &&
                              parse_int(trim(item.substr(dash + 1)), b);
    FSDPP_CHECK_AS(ConfigError, ok && a >= 1 && b >= a && b - a < 100000,
                   "[trace] {}='{}': '{}' is not a step or a range of steps; expected steps >= 1 "
                   "such as 10,11 or 10-12",
                   what, text, item);
    for (int64_t s = a; s <= b; ++s) steps.push_back(s);
  }
  return steps;
}

std::shared_ptr<TraceRecorder> TraceRecorder::from_env(int rank) {
  const char* steps = std::getenv("FSDPP_PROFILE_STEPS");
  if (steps == nullptr || *steps == '\0') return nullptr;
  const char* dir = std::getenv("FSDPP_TRACE_DIR");
  TraceOptions o;
  o.rank = rank;
  o.steps = parse_steps(steps, "FSDPP_PROFILE_STEPS");
  o.dir = dir != nullptr && *dir != '\0' ? dir : "traces";
  if (o.steps.empty()) return nullptr;
  return std::make_shared<TraceRecorder>(std::move(o));
}

bool TraceRecorder::profiled(int64_t step) const {
  return std::binary_search(options_.steps.begin(), options_.steps.end(), step);
}

void TraceRecorder::begin_step(int64_t step) {
  driven_.store(true, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  current_step_ = step;
  step_begin_ = Clock::now();
  active_.store(profiled(step), std::memory_order_relaxed);
}

void TraceRecorder::end_step(int64_t step, std::optional<Clock::time_point> end,
                             std::vector<TraceArg> args) {
  if (!active()) return;
  const auto until = end.value_or(Clock::now());
  args.insert(args.begin(), TraceArg{"step", step});
  complete(thread_track(), fmt::format("step {}", step), step_begin_, until, std::move(args));
  active_.store(false, std::memory_order_relaxed);
  if (step >= last_step_) write();
}

void TraceRecorder::auto_step() {
  if (driven_.load(std::memory_order_relaxed)) return;
  // The previous training forward's step ends where this one begins.
  const auto now = Clock::now();
  if (active()) {
    complete(thread_track(), fmt::format("step {}", auto_count_), step_begin_, now,
             {{"step", auto_count_}});
    active_.store(false, std::memory_order_relaxed);
    if (auto_count_ >= last_step_) write();
  }
  ++auto_count_;
  std::lock_guard<std::mutex> lock(mutex_);
  current_step_ = auto_count_;
  step_begin_ = now;
  active_.store(profiled(auto_count_), std::memory_order_relaxed);
}

int TraceRecorder::thread_track() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto id = std::this_thread::get_id();
  if (auto it = thread_tracks_.find(id); it != thread_tracks_.end()) return it->second;
  const int track = static_cast<int>(track_names_.size());
  track_names_.push_back(thread_tracks_.empty() ? std::string("main")
                                                : fmt::format("thread {}", thread_tracks_.size() + 1));
  thread_tracks_.emplace(id, track);
  return track;
}

int TraceRecorder::named_track(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find(track_names_.begin(), track_names_.end(), name);
  if (it != track_names_.end()) return static_cast<int>(it - track_names_.begin());
  track_names_.push_back(name);
  return static_cast<int>(track_names_.size()) - 1;
}

void TraceRecorder::complete(int track, std::string name, Clock::time_point begin,
                             Clock::time_point end, std::vector<TraceArg> args) {
  try {
    const int64_t ts = micros(begin);
    const int64_t dur = std::max<int64_t>(0, micros(end) - ts);
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(Event{track, std::move(name), ts, dur, std::move(args)});
    dirty_ = true;
  } catch (...) {
    // An event lost to a failed allocation is not worth failing a collective or a destructor.
  }
}

std::vector<TraceArg> counter_args(const CommCounters& counters) {
  std::vector<TraceArg> args;
  for (int k = 0; k < kNumCollectives; ++k) {
    if (counters.calls[k] == 0) continue;
    const std::string kind = to_string(static_cast<Collective>(k));
    args.push_back({"calls_" + kind, static_cast<int64_t>(counters.calls[k])});
    args.push_back({"bytes_" + kind, static_cast<int64_t>(counters.bytes[k])});
  }
  return args;
}

std::filesystem::path TraceRecorder::path() const {
  return options_.dir / fmt::format("rank{}.trace.json", options_.rank);
}

void TraceRecorder::set_dir(std::filesystem::path dir) { options_.dir = std::move(dir); }

std::filesystem::path TraceRecorder::write() {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.reserve(256 + events_.size() * 160);
    out += "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"rank\": ";
    out += std::to_string(options_.rank);
    out += ", \"steps\": [";
    for (size_t i = 0; i < options_.steps.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(options_.steps[i]);
    }
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    // The steady clock's offset from the Unix epoch: a merge of several hosts' files aligns
    // them by it (one host's processes share the steady clock already).
    const auto unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    out += "], \"host\": ";
    append_json_string(out, host);
    out += fmt::format(", \"unix_minus_steady_us\": {}}},\n\"traceEvents\": [\n",
                       unix_us - micros(Clock::now()));
    const int pid = options_.rank;
    out += fmt::format(
        "{{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": {0}, \"tid\": 0, \"args\": "
        "{{\"name\": \"rank {0}\"}}}},\n{{\"ph\": \"M\", \"name\": \"process_sort_index\", "
        "\"pid\": {0}, \"tid\": 0, \"args\": {{\"sort_index\": {0}}}}}",
        pid);
    for (size_t t = 0; t < track_names_.size(); ++t) {
      out += fmt::format(",\n{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {}, \"tid\": {}, "
                         "\"args\": {{\"name\": ",
                         pid, t);
      append_json_string(out, track_names_[t]);
      out += fmt::format("}}}},\n{{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": {}, "
                         "\"tid\": {}, \"args\": {{\"sort_index\": {}}}}}",
                         pid, t, t);
    }
    for (const auto& e : events_) {
      out += fmt::format(",\n{{\"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {}, \"dur\": {}, "
                         "\"name\": ",
                         pid, e.track, e.ts_us, e.dur_us);
      append_json_string(out, e.name);
      out += ", \"args\": {";
      for (size_t i = 0; i < e.args.size(); ++i) {
        if (i) out += ", ";
        append_json_string(out, e.args[i].key);
        out += ": ";
        const auto& v = e.args[i].value;
        if (const auto* n = std::get_if<int64_t>(&v)) {
          out += std::to_string(*n);
        } else if (const auto* d = std::get_if<double>(&v)) {
          out += fmt::format("{}", *d);
        } else {
          append_json_string(out, std::get<std::string>(v));
        }
      }
      out += "}}";
    }
    out += "\n]}\n";
    dirty_ = false;
    written_ = true;
  }
  const auto file = path();
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  FSDPP_CHECK(!ec, "[trace] cannot create the trace directory '{}': {}", options_.dir.string(),
              ec.message());
  // A reader never sees half a trace.
  write_file_atomically(file, out, "trace");
  return file;
}

}  // namespace fsdpp::dist
