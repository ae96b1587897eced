// The run's picture (fsdpp/observe/run_plot.h): two panels over the same step axis, losses above,
// memory per rank below, as plain SVG so that it opens in any browser and renders on GitHub.
#include "fsdpp/observe/run_plot.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"

namespace fsdpp::observe {
namespace {

struct Series {
  Series() = default;
  Series(std::string n, std::string c, bool dash = false, bool dot = false)
      : name(std::move(n)), colour(std::move(c)), dashed(dash), dots(dot) {}
  std::string name;
  std::string colour;
  bool dashed = false;
  bool dots = false;  // few points (validation): marked, not only joined
  std::vector<std::pair<double, double>> points;
};

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// Ticks at 1, 2 or 5 times a power of ten, about `want` of them over [lo, hi]; the range grows
// to whole ticks.
std::vector<double> ticks(Range& r, int want) {
  if (r.empty()) r = {0, 1};
  if (r.hi - r.lo < 1e-12) {
    const double pad = std::max(std::abs(r.lo) * 0.05, 1e-3);
    r.lo -= pad;
    r.hi += pad;
  }
  const double raw = (r.hi - r.lo) / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    step = f * mag;
    if (step >= raw) break;
  }
  r.lo = std::floor(r.lo / step) * step;
  r.hi = std::ceil(r.hi / step) * step;
  std::vector<double> out;
  for (double v = r.lo; v <= r.hi + step * 1e-6; v += step) out.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

std::string number(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) return fmt::format("{:.1e}", v);
  return fmt::format("{:g}", v);
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

constexpr double kWidth = 900, kPanel = 300, kLeft = 70, kRight = 170, kTop = 40, kGap = 50;

// One panel at vertical offset `y0`: frame, ticks, the series, a legend on the right.
void panel(std::ostringstream& o, double y0, const std::string& ylabel, Range xr,
           const std::vector<Series>& series) {
  Range yr;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) yr.add(y);
  }
  const auto xt = ticks(xr, 8);
  const auto yt = ticks(yr, 5);
  const double w = kWidth - kLeft - kRight, h = kPanel - 40;
  auto X = [&](double x) { return kLeft + (x - xr.lo) / (xr.hi - xr.lo) * w; };
  auto Y = [&](double y) { return y0 + h - (y - yr.lo) / (yr.hi - yr.lo) * h; };
  o << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)"
                   "\n",
                   kLeft, y0, w, h);
  for (double v : xt) {
    o << fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#eee"/>)"
                     R"(<text x="{0:.1f}" y="{3}" text-anchor="middle">{4}</text>)"
                     "\n",
                     X(v), y0, y0 + h, y0 + h + 16, number(v));
  }
  for (double v : yt) {
    o << fmt::format(R"(<line x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}" stroke="#eee"/>)"
                     R"(<text x="{3}" y="{4:.1f}" text-anchor="end">{5}</text>)"
                     "\n",
                     kLeft, kLeft + w, Y(v), kLeft - 6, Y(v) + 4, number(v));
  }
  o << fmt::format(R"svg(<text x="16" y="{:.1f}" transform="rotate(-90 16 {:.1f})" )svg"
                   R"(text-anchor="middle">{}</text>)"
                   "\n",
                   y0 + h / 2, y0 + h / 2, escape(ylabel));
  double ly = y0 + 10;
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    const std::string dash = s.dashed ? R"( stroke-dasharray="6 4")" : "";
    o << R"(<polyline fill="none" stroke-width="1.5" stroke=")" << s.colour << '"' << dash
      << R"( data-series=")" << escape(s.name) << R"(" points=")";
    for (const auto& [x, y] : s.points) o << fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
    o << "\"/>\n";
    if (s.dots) {
      for (const auto& [x, y] : s.points) {
        o << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", X(x), Y(y), s.colour);
      }
      o << '\n';
    }
    o << fmt::format(R"(<line x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}" stroke="{3}" )"
                     R"(stroke-width="2"{4}/><text x="{5}" y="{6:.1f}">{7}</text>)"
                     "\n",
                     kLeft + w + 10, kLeft + w + 34, ly, s.colour, dash, kLeft + w + 40, ly + 4,
                     escape(s.name));
    ly += 18;
  }
  o << fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">step</text>)"
                   "\n",
                   kLeft + w / 2, y0 + h + 32);
}

// Colours that stay apart for up to eight ranks; more ranks reuse them.
const char* rank_colour(size_t r) {
  static constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                             "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
  return kColours[r % 8];
}

}  // namespace

std::string run_plot_svg(const std::filesystem::path& metrics_jsonl, const std::string& title,
                         RunPlotSummary* summary) {
  std::ifstream in(metrics_jsonl);
  FSDPP_CHECK(in, "[plot] cannot read {}", metrics_jsonl.string());
  Series loss{"loss", "#1f77b4"}, val{"validation loss", "#ff7f0e", false, true},
      kd{"kd_loss", "#2ca02c", true}, ce{"ce_loss", "#9467bd", true},
      peak{"peak, max of ranks", "#000000", true};
  std::map<size_t, Series> ranks;
  Range xr;
  RunPlotSummary sum;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j.contains("loss") || !j["step"].is_number() ||
        !j["loss"].is_number()) {
      continue;
    }
    const double step = j["step"].get<double>();
    xr.add(step);
    ++sum.points;
    loss.points.emplace_back(step, j["loss"].get<double>());
    auto add = [&](Series& s, const char* key) {
      if (j.contains(key) && j[key].is_number()) s.points.emplace_back(step, j[key].get<double>());
    };
    const auto before = val.points.size();
    add(val, "val_loss");
    if (val.points.size() > before) ++sum.val_points;
    add(kd, "kd_loss");
    add(ce, "ce_loss");
    add(peak, "peak_rss_mb");
    if (j.contains("rss_mb_per_rank") && j["rss_mb_per_rank"].is_array()) {
      const auto& a = j["rss_mb_per_rank"];
      for (size_t r = 0; r < a.size(); ++r) {
        if (!a[r].is_number()) continue;
        auto& s = ranks[r];
        if (s.name.empty()) s = Series(fmt::format("rank {} RSS", r), rank_colour(r));
        s.points.emplace_back(step, a[r].get<double>());
      }
    }
  }
  FSDPP_CHECK(sum.points > 0, "[plot] {} holds no line with a step and a loss",
              metrics_jsonl.string());
  sum.ranks = static_cast<int>(ranks.size());
  if (summary) *summary = sum;
  if (xr.hi - xr.lo < 1) xr.hi = xr.lo + 1;

  const double height = kTop + 2 * kPanel + kGap;
  std::ostringstream o;
  o << fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" )"
                   R"(font-family="sans-serif" font-size="12">)"
                   "\n"
                   R"(<rect width="100%" height="100%" fill="white"/>)"
                   "\n"
                   R"(<text x="{}" y="22" font-size="15">{}</text>)"
                   "\n",
                   kWidth, height, kLeft, escape(title));
  panel(o, kTop, "loss", xr, {loss, val, kd, ce});
  std::vector<Series> memory;
  for (auto& [r, s] : ranks) memory.push_back(std::move(s));
  memory.push_back(peak);
  panel(o, kTop + kPanel + kGap / 2, "memory (MiB)", xr, memory);
  o << "</svg>\n";
  return o.str();
}

RunPlotSummary write_run_plot(const std::filesystem::path& run_dir, const std::filesystem::path& svg) {
  RunPlotSummary sum;
  auto name = std::filesystem::absolute(run_dir).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();  // "runs/x/"
  const auto text = run_plot_svg(run_dir / "metrics.jsonl",
                                 fmt::format("{}: loss and memory per rank", name.filename().string()),
                                 &sum);
  AtomicFile f(svg.empty() ? run_dir / "run.svg" : svg, "plot");
  f.write(text);
  f.commit();
  return sum;
}

}  // namespace fsdpp::observe
