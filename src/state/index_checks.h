#pragma once
// Private to src/state: what both readers of a checkpoint's index.json (load_state_dict in
// state_dict.cpp, CheckpointReader for fsdpp-ckpt) check before they trust it. Each throws
// CheckpointError naming the index file.

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace fsdpp::state::detail {

// The index format versions this build reads. fsdpp has only ever written version 1; an index
// without "version" is read as 1.
inline constexpr int kIndexVersion = 1;

// `path` (an index.json, a trainer_state.json, ...) must be a regular file: a directory would
// read as empty text and a FIFO would block the first open() forever. Follows symlinks.
void require_regular_file(const std::filesystem::path& path, const char* what);

// "version" must be one this build reads.
void check_index_version(const nlohmann::json& index, const std::filesystem::path& index_path);
void check_index_version(const nlohmann::ordered_json& index, const std::filesystem::path& index_path);

// A data file named by the index must lie inside the checkpoint directory: a relative path
// with no ".." component (checked lexically, so a checkpoint stays readable wherever it is
// copied). Returns `name`.
const std::string& checked_file_name(const std::string& name, const std::filesystem::path& index_path);

}  // namespace fsdpp::state::detail
