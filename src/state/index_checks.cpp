// Checks on a checkpoint's index.json shared by its two readers. See index_checks.h.
#include "index_checks.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::state::detail {
namespace {

template <typename Json>
void check_version(const Json& index, const fs::path& index_path) {
  if (!index.is_object() || !index.contains("version")) return;
  const auto& v = index["version"];
  FSDPP_CHECK_AS(CheckpointError, v.is_number_integer() && v.template get<int64_t>() == kIndexVersion,
                 "[state] '{}' has version {}; this build of fsdpp reads version {} only (a "
                 "checkpoint written by a newer fsdpp, or a corrupt index)",
                 index_path.string(), v.dump(), kIndexVersion);
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

}  // namespace

void require_regular_file(const fs::path& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    FSDPP_THROW(CheckpointError, "[state] cannot read {} '{}': {}", what, path.string(),
                std::strerror(errno));
  FSDPP_CHECK_AS(CheckpointError, S_ISREG(st.st_mode), "[state] {} '{}' is {}; expected a regular file",
                 what, path.string(), kind_of(st.st_mode));
}

void check_index_version(const nlohmann::json& index, const fs::path& index_path) {
  check_version(index, index_path);
}
void check_index_version(const nlohmann::ordered_json& index, const fs::path& index_path) {
  check_version(index, index_path);
}

const std::string& checked_file_name(const std::string& name, const fs::path& index_path) {
  const fs::path p(name);
  bool inside = !name.empty() && !p.is_absolute() && !p.has_root_path();
  for (const auto& part : p) inside = inside && part != "..";
  FSDPP_CHECK_AS(CheckpointError, inside,
                 "[state] '{}' names the data file '{}'; expected a file name inside the "
                 "checkpoint directory (no absolute path, no '..')",
                 index_path.string(), name);
  return name;
}

}  // namespace fsdpp::state::detail
