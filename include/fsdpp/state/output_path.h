#pragma once
// Where an offline tool (fsdpp-ckpt) may write: never over something that exists unless asked,
// and never where the write could touch what it reads.
//
//   check_output_path("consolidate", out, {ckpt_dir}, OutputKind::kFile, force);
//   SafetensorsWriter w(out);   // safe: out is new (or --force), and outside ckpt_dir
//
// Paths are compared after std::filesystem::weakly_canonical, so "ckpt/./shard-0.safetensors",
// "ckpt/../ckpt/x" and a symlink into the input all count as inside it.

#include <filesystem>
#include <string_view>
#include <vector>

namespace fsdpp::state {

enum class OutputKind { kFile, kDirectory };

// Throws CheckpointError ("[state] <tool>: ...", naming the paths) when
//  - `out` is one of `inputs`, lies inside one of them, or contains one of them: writing it
//    (or replacing it) would change or delete the input. Refused even with `overwrite`.
//  - `out` exists and `overwrite` is false ("... exists; give a new path, or --force").
//  - `out` exists as the other kind (a file where a directory is written or the reverse):
//    refused even with `overwrite`, since replacing it is never what was meant.
// An input that does not exist is compared all the same (the tool reports it missing later).
void check_output_path(std::string_view tool, const std::filesystem::path& out,
                       const std::vector<std::filesystem::path>& inputs, OutputKind kind,
                       bool overwrite);

// True when `inner` is `outer` or lies under it, component by component, after both are
// resolved with weakly_canonical ("a/bc" is not inside "a/b").
bool path_is_within(const std::filesystem::path& inner, const std::filesystem::path& outer);

}  // namespace fsdpp::state
