// Measured timelines: the summary (bubble, peak activations, mean costs), the gathering over
// the pp group, and the pictures (SVG and text).

#include "fsdpp/pipeline/timeline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <malloc.h>
#include <sstream>

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/string_collectives.h"
#include "fsdpp/pipeline/runtime.h"

namespace fsdpp::pipeline {

std::vector<int> peak_activations(const PipelineSchedule& schedule) {
  std::vector<int> live(static_cast<size_t>(schedule.num_stages), 0);
  std::vector<int> peak(live.size(), 0);
  for (const auto& list : schedule.actions) {
    for (const auto& a : list) {
      auto s = static_cast<size_t>(a.stage);
      if (a.kind == ActionKind::F) peak[s] = std::max(peak[s], ++live[s]);
      if (is_backward(a.kind)) --live[s];
    }
  }
  return peak;
}

int64_t malloc_bytes_in_use() {
  const auto mi = mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
}

MeasuredTimeline summarize(const PipelineSchedule& schedule, std::vector<MeasuredRank> ranks) {
  MeasuredTimeline t;
  t.schedule = schedule.name;
  t.num_microbatches = schedule.num_microbatches;
  t.stage_to_rank = schedule.stage_to_rank;
  t.ranks = std::move(ranks);
  double busy = 0;
  double sum[4] = {0, 0, 0, 0};
  int count[4] = {0, 0, 0, 0};
  for (const auto& r : t.ranks) {
    t.makespan_ms = std::max(t.makespan_ms, r.end_ms);
    busy += r.busy_ms;
    for (const auto& a : r.actions) {
      const int k = a.action.kind == ActionKind::F   ? 0
                    : a.action.kind == ActionKind::B ? 1
                    : a.action.kind == ActionKind::I ? 2
                    : a.action.kind == ActionKind::W ? 3
                                                     : -1;
      if (k < 0) continue;
      sum[k] += a.end_ms - a.start_ms;
      ++count[k];
    }
  }
  auto mean = [&](int k) { return count[k] ? sum[k] / count[k] : 0.0; };
  t.mean_forward_ms = mean(0);
  t.mean_backward_ms = mean(1);
  t.mean_input_ms = mean(2);
  t.mean_weight_ms = mean(3);
  const double total = t.makespan_ms * static_cast<double>(t.ranks.size());
  t.bubble_fraction = total > 0 ? (total - busy) / total : 0;
  t.peak_activations = peak_activations(schedule);
  return t;
}

MeasuredTimeline PipelineRuntime::gather_timeline() const {
  // One line per action: "<action> <start> <end> <bytes>"; the first line "<busy> <end>
  // <start bytes> <peak above start>".
  std::ostringstream out;
  out << fmt::format("{:.6f} {:.6f} {} {}\n", timings_.busy_ms, timings_.end_ms,
                     timings_.start_bytes, timings_.peak_bytes_above_start);
  for (const auto& a : timings_.actions) {
    out << fmt::format("{} {:.6f} {:.6f} {}\n", to_string(a.action), a.start_ms, a.end_ms, a.bytes);
  }
  const auto texts = dist::all_gather_strings(*pp_, out.str(), {"pipeline timeline"});
  std::vector<MeasuredRank> ranks;
  for (const auto& text : texts) {
    std::istringstream in(text);
    MeasuredRank r;
    in >> r.busy_ms >> r.end_ms >> r.start_bytes >> r.peak_bytes_above_start;
    std::string token;
    MeasuredAction a;
    while (in >> token >> a.start_ms >> a.end_ms >> a.bytes) {
      a.action = parse_action(token);
      r.actions.push_back(a);
    }
    ranks.push_back(std::move(r));
  }
  return summarize(schedule_, std::move(ranks));
}

namespace {

// F blue, B green, I orange, W purple; a rank's second (third, ...) stage lighter.
std::string colour(ActionKind kind, int local_index) {
  static const char* base[4][2] = {{"#3b6fb6", "#8fb3e3"},
                                   {"#3c9a4c", "#9bd3a4"},
                                   {"#e08a2c", "#f4c58f"},
                                   {"#8a56b0", "#c9a9e0"}};
  const int k = kind == ActionKind::F ? 0 : kind == ActionKind::B ? 1 : kind == ActionKind::I ? 2 : 3;
  return base[k][std::min(local_index, 1)];
}

int local_index(const MeasuredTimeline& t, int stage) {
  const int rank = t.stage_to_rank.at(static_cast<size_t>(stage));
  int i = 0;
  for (int s = 0; s < stage; ++s) i += t.stage_to_rank[static_cast<size_t>(s)] == rank;
  return i;
}

}  // namespace

std::string timeline_svg(const MeasuredTimeline& t) {
  const double width = 960, left = 70, right = 20, top = 46, row_h = 34, gap = 8;
  const double span = std::max(t.makespan_ms, 1e-9);
  const double scale = (width - left - right) / span;
  const double height = top + static_cast<double>(t.ranks.size()) * (row_h + gap) + 40;
  std::ostringstream o;
  o << fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" )"
                   R"(font-family="sans-serif" font-size="11">)"
                   "\n",
                   width, height);
  o << fmt::format(R"(<rect width="100%" height="100%" fill="white"/>)"
                   "\n"
                   R"(<text x="{:.0f}" y="20" font-size="14">{}, m = {}: measured bubble {:.1f}%, )"
                   R"(makespan {:.2f} ms</text>)"
                   "\n",
                   left, t.schedule, t.num_microbatches, 100 * t.bubble_fraction, t.makespan_ms);
  o << fmt::format(R"(<text x="{:.0f}" y="36" fill="#555">F forward, B backward, I input )"
                   R"(gradient, W weight gradient; a rank's second stage lighter; ticks: sends )"
                   R"((top) and recvs (bottom)</text>)"
                   "\n",
                   left);
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const double y = top + static_cast<double>(r) * (row_h + gap);
    o << fmt::format(R"(<text x="8" y="{:.1f}">rank {}</text>)"
                     "\n"
                     R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#f2f2f2"/>)"
                     "\n",
                     y + row_h / 2 + 4, r, left, y, width - left - right, row_h);
    for (const auto& a : t.ranks[r].actions) {
      const double x = left + a.start_ms * scale;
      const double w = std::max(0.5, (a.end_ms - a.start_ms) * scale);
      if (is_compute(a.action.kind)) {
        o << fmt::format(R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{:.1f}" )"
                         R"(fill="{}" stroke="white" stroke-width="0.5"><title>{} {:.3f}-{:.3f} )"
                         R"(ms</title></rect>)"
                         "\n",
                         x, y, w, row_h, colour(a.action.kind, local_index(t, a.action.stage)),
                         describe(a.action), a.start_ms, a.end_ms);
        if (w >= 12) {
          o << fmt::format(R"(<text x="{:.2f}" y="{:.1f}" text-anchor="middle" fill="white">{}{})"
                           R"(</text>)"
                           "\n",
                           x + w / 2, y + row_h / 2 + 4, kind_name(a.action.kind),
                           a.action.microbatch);
        }
      } else if (is_send(a.action.kind) || is_recv(a.action.kind)) {
        const double y0 = is_send(a.action.kind) ? y - 3 : y + row_h;
        o << fmt::format(R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="3" fill="#999"/>)"
                         "\n",
                         x, y0, w);
      }
    }
  }
  const double axis_y = top + static_cast<double>(t.ranks.size()) * (row_h + gap) + 12;
  o << fmt::format(R"(<text x="{:.0f}" y="{:.1f}">0 ms</text>)"
                   "\n"
                   R"(<text x="{:.0f}" y="{:.1f}" text-anchor="end">{:.2f} ms</text>)"
                   "\n",
                   left, axis_y, width - right, axis_y, t.makespan_ms);
  o << "</svg>\n";
  return o.str();
}

void write_timeline_svg(const MeasuredTimeline& timeline, const std::string& path) {
  std::ofstream out(path);
  FSDPP_CHECK(out.good(), "[pipeline] cannot write the timeline picture to '{}'", path);
  out << timeline_svg(timeline);
  FSDPP_CHECK(out.good(), "[pipeline] writing the timeline picture to '{}' failed", path);
}

std::string render_measured(const MeasuredTimeline& t, double ms_per_column) {
  if (ms_per_column <= 0) ms_per_column = std::max(t.makespan_ms / 100.0, 1e-6);
  const auto cols = static_cast<size_t>(std::ceil(t.makespan_ms / ms_per_column));
  std::ostringstream o;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    std::string line(cols, '.');
    for (const auto& a : t.ranks[r].actions) {
      if (!is_compute(a.action.kind)) continue;
      char c = kind_name(a.action.kind)[0];
      if (local_index(t, a.action.stage) % 2 == 1) c = static_cast<char>(std::tolower(c));
      const auto b = static_cast<size_t>(a.start_ms / ms_per_column);
      const auto e = std::max(b + 1, static_cast<size_t>(a.end_ms / ms_per_column));
      for (size_t k = b; k < std::min(e, cols); ++k) line[k] = c;
    }
    o << fmt::format("rank {} | {}\n", r, line);
  }
  return o.str();
}

}  // namespace fsdpp::pipeline
