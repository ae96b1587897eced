#include "fsdpp/pipeline/csv.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "fsdpp/common/error.h"

namespace fsdpp::pipeline {
namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

void write_csv(const PipelineSchedule& schedule, std::ostream& out) {
  for (const auto& row : schedule.actions) {
    for (size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << to_string(row[i]);
    out << '\n';
  }
}

std::string to_csv(const PipelineSchedule& schedule) {
  std::ostringstream out;
  write_csv(schedule, out);
  return out.str();
}

void save_csv(const PipelineSchedule& schedule, const std::string& path) {
  std::ofstream out(path);
  FSDPP_CHECK(out.good(), "[pipeline] cannot open '{}' to write the schedule", path);
  write_csv(schedule, out);
  out.flush();
  FSDPP_CHECK(out.good(), "[pipeline] writing the schedule to '{}' failed", path);
}

PipelineSchedule read_csv(std::istream& in, const std::string& name) {
  PipelineSchedule s;
  s.name = name;
  std::string line;
  int line_no = 0;
  int max_stage = -1;
  while (std::getline(in, line)) {
    ++line_no;
    std::vector<Action> row;
    std::string_view rest = line;
    while (true) {
      size_t comma = rest.find(',');
      std::string_view cell = trimmed(rest.substr(0, comma));
      if (!cell.empty()) {
        try {
          row.push_back(parse_action(cell));
        } catch (const Error& e) {
          FSDPP_THROW(Error, "[pipeline] csv line {} (rank {}): {}", line_no, line_no - 1,
                      e.what());
        }
        const Action& a = row.back();
        max_stage = std::max(max_stage, a.stage);
        s.num_microbatches = std::max(s.num_microbatches, a.microbatch + 1);
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    s.actions.push_back(std::move(row));
  }
  // Blank lines at the end (an editor's extra newline) are not ranks; a blank row between
  // others is a rank with nothing to do.
  while (!s.actions.empty() && s.actions.back().empty()) s.actions.pop_back();
  s.num_ranks = static_cast<int>(s.actions.size());
  FSDPP_CHECK(s.num_ranks > 0, "[pipeline] the csv schedule '{}' has no rows (one per rank)", name);
  s.num_stages = max_stage + 1;
  s.stage_to_rank.assign(static_cast<size_t>(s.num_stages), -1);
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      int& owner = s.stage_to_rank[static_cast<size_t>(a.stage)];
      FSDPP_CHECK(owner == -1 || owner == r,
                  "[pipeline] csv line {}: stage {} appears on rank {} and on rank {}; a stage "
                  "lives on one rank",
                  r + 1, a.stage, owner, r);
      owner = r;
    }
  }
  for (int st = 0; st < s.num_stages; ++st)
    FSDPP_CHECK(s.stage_to_rank[static_cast<size_t>(st)] != -1,
                "[pipeline] csv schedule '{}': stage {} appears in no row, but stage {} does",
                name, st, s.num_stages - 1);
  return s;
}

PipelineSchedule from_csv(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  return read_csv(in, name);
}

PipelineSchedule load_csv(const std::string& path) {
  std::ifstream in(path);
  FSDPP_CHECK(in.good(), "[pipeline] cannot open the schedule file '{}'", path);
  return read_csv(in, path);
}

}  // namespace fsdpp::pipeline
