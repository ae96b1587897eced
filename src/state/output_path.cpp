// Guards for offline tools that write checkpoints. See include/fsdpp/state/output_path.h.
#include "fsdpp/state/output_path.h"

#include <algorithm>
#include <system_error>

#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::state {
namespace {

// Absolute, symlinks of the existing part resolved, "." and ".." gone, no trailing "/".
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r = fs::absolute(p).lexically_normal();
  if (r.has_parent_path() && r.filename().empty()) r = r.parent_path();
  return r;
}

}  // namespace

bool path_is_within(const fs::path& inner, const fs::path& outer) {
  const fs::path a = resolved(inner), b = resolved(outer);
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai) {
    if (ai == a.end() || *ai != *bi) return false;
  }
  return true;
}

void check_output_path(std::string_view tool, const fs::path& out, const std::vector<fs::path>& inputs,
                       OutputKind kind, bool overwrite) {
  for (const fs::path& in : inputs) {
    if (in.empty()) continue;
    FSDPP_CHECK_AS(CheckpointError, !path_is_within(out, in),
                   "[state] {}: the output '{}' is {} the input '{}'; it would overwrite what it "
                   "reads (refused even with --force); write it elsewhere",
                   tool, out.string(), resolved(out) == resolved(in) ? "the same path as" : "inside",
                   in.string());
    FSDPP_CHECK_AS(CheckpointError, !path_is_within(in, out),
                   "[state] {}: the input '{}' is inside the output '{}'; replacing the output "
                   "would delete it (refused even with --force); write it elsewhere",
                   tool, in.string(), out.string());
  }
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (!fs::exists(st)) return;
  const bool is_dir = fs::is_directory(fs::status(out, ec));
  if (kind == OutputKind::kDirectory) {
    FSDPP_CHECK_AS(CheckpointError, is_dir,
                   "[state] {}: the output '{}' exists and is not a directory; {} writes a "
                   "directory and does not replace a file (refused even with --force)",
                   tool, out.string(), tool);
  } else {
    FSDPP_CHECK_AS(CheckpointError, !is_dir,
                   "[state] {}: the output '{}' is a directory; {} writes one file and does not "
                   "replace a directory (refused even with --force)",
                   tool, out.string(), tool);
  }
  FSDPP_CHECK_AS(CheckpointError, overwrite,
                 "[state] {}: the output '{}' exists; give a new path, or --force to replace it",
                 tool, out.string());
}

}  // namespace fsdpp::state
