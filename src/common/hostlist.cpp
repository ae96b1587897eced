#include "fsdpp/common/hostlist.h"

#include "fsdpp/common/error.h"
#include "fsdpp/common/whole_number.h"

namespace fsdpp {
namespace {

constexpr size_t kMaxHosts = 1'000'000;

// The list's items: commas inside brackets do not split.
std::vector<std::string_view> split_top(std::string_view list, std::string_view whole) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    FSDPP_CHECK_AS(ConfigError, depth >= 0 && depth <= 1,
                   "[hostlist] '{}' is not a SLURM host list: brackets do not nest or match; expected e.g. "
                   "gpu[01-04,07],login1", whole);
    if (c == ',' && depth == 0) {
      if (i > start) items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  FSDPP_CHECK_AS(ConfigError, depth == 0, "[hostlist] '{}' has an unclosed '['", whole);
  return items;
}

struct Range {
  int64_t lo = 0, hi = 0;
  size_t width = 0;  // digits, with the leading zeros of "01"
};

std::vector<Range> parse_ranges(std::string_view inside, std::string_view whole) {
  std::vector<Range> out;
  size_t start = 0;
  for (size_t i = 0; i <= inside.size(); ++i) {
    if (i < inside.size() && inside[i] != ',') continue;
    const std::string_view part = inside.substr(start, i - start);
    start = i + 1;
    const size_t dash = part.find('-');
    const std::string_view a = part.substr(0, dash);
    const std::string_view b = dash == std::string_view::npos ? a : part.substr(dash + 1);
    const auto lo = parse_whole_number(a);
    const auto hi = parse_whole_number(b);
    FSDPP_CHECK_AS(ConfigError, lo && hi && *lo >= 0 && *lo <= *hi,
                   "[hostlist] '{}': '[{}]' holds '{}', which is not a number or a range lo-hi with lo <= hi",
                   whole, inside, part);
    out.push_back({*lo, *hi, a.size()});
  }
  return out;
}

std::string padded(int64_t n, size_t width) {
  std::string s = std::to_string(n);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

void expand_item(std::string_view item, std::string_view whole, std::vector<std::string>& out,
                 const std::string& head) {
  const size_t open = item.find('[');
  if (open == std::string_view::npos) {
    FSDPP_CHECK_AS(ConfigError, out.size() < kMaxHosts, "[hostlist] '{}' names more than {} hosts",
                   whole, kMaxHosts);
    out.push_back(head + std::string(item));
    return;
  }
  const size_t close = item.find(']', open);
  const std::string prefix = head + std::string(item.substr(0, open));
  const std::string_view rest = item.substr(close + 1);
  for (const Range& r : parse_ranges(item.substr(open + 1, close - open - 1), whole)) {
    for (int64_t n = r.lo; n <= r.hi; ++n) expand_item(rest, whole, out, prefix + padded(n, r.width));
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list) {
  std::vector<std::string> out;
  for (std::string_view item : split_top(list, list)) expand_item(item, list, out, "");
  FSDPP_CHECK_AS(ConfigError, !out.empty(), "[hostlist] '{}' names no host", list);
  return out;
}

std::string first_host(std::string_view list) {
  const auto items = split_top(list, list);
  FSDPP_CHECK_AS(ConfigError, !items.empty(), "[hostlist] '{}' names no host", list);
  std::string host;
  std::string_view item = items.front();
  for (size_t open; (open = item.find('[')) != std::string_view::npos;) {
    const size_t close = item.find(']', open);
    host += std::string(item.substr(0, open));
    const Range first = parse_ranges(item.substr(open + 1, close - open - 1), list).front();
    host += padded(first.lo, first.width);
    item = item.substr(close + 1);
  }
  return host + std::string(item);
}

}  // namespace fsdpp
