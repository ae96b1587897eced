#pragma once
// What data.path names: the files to read, in order, and the format of each.
//
//   auto files = fsdpp::data::resolve_data_path("data/train-*.parquet");
//   if (files.is_text()) { /* plain text: the token-file route (token_dataset.h) */ }
//   else for (const auto& f : files.files) { /* f.path, f.format, f.compression */ }
//
// data.path may be
//   - a file: its format from its extension (data_file below);
//   - a directory that `datasets`' save_to_disk wrote (it holds state.json): the Arrow files that
//     state.json's "_data_files" lists, in that order;
//   - any other directory: the data files directly in it (by extension: .jsonl, .json, .parquet,
//     .arrow, ...), in name order, leaving out hidden files and datasets' metadata files
//     (dataset_info.json, state.json); a directory with no data file is text (below);
//   - a glob (`data/train-*.parquet`, `shards/*/part-?.jsonl.zst`): the files it matches, in name
//     order (it must match at least one).
// Plain text (.txt, and any name this reader does not know) keeps the token-file route, which is
// the caller's: a text file or a directory of text files resolves to format TEXT with `files`
// holding data.path itself, a glob of text files to the files it matched. Text and data files are
// not mixed in one data.path.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::data {

enum class FileFormat {
  TEXT,     // not read here: the caller's text route
  JSON,     // .jsonl / .json / .ndjson: JSON Lines, or one JSON array (record_reader.h)
  PARQUET,  // .parquet
  ARROW,    // .arrow: Arrow IPC stream (what save_to_disk writes) or IPC file (Feather v2)
};

enum class Compression {
  NONE,
  GZIP,  // .gz (JSON only; Parquet and Arrow compress inside the file)
  ZSTD,  // .zst / .zstd (JSON only)
};

// "text", "json", "parquet", "arrow"; "none", "gzip", "zstd".
std::string_view format_name(FileFormat format);
std::string_view compression_name(Compression compression);

struct DataFile {
  std::filesystem::path path;
  FileFormat format = FileFormat::TEXT;
  Compression compression = Compression::NONE;
};

// The format and compression that a file's name says (case-insensitive): "x.jsonl.zst" is
// (JSON, ZSTD), "x.parquet" (PARQUET, NONE), "notes.txt" and "README" (TEXT, NONE). Throws
// ConfigError for a compressed Parquet or Arrow file ("x.parquet.gz"), which nothing reads.
DataFile data_file(const std::filesystem::path& path);

struct DataFiles {
  std::string path;             // data.path as given, for messages
  std::vector<DataFile> files;  // in reading order; never empty
  bool saved_dataset = false;   // a save_to_disk directory (files from its state.json)

  // Plain text: `files` is data.path itself (a file or a directory) or a glob's text files.
  bool is_text() const { return files.front().format == FileFormat::TEXT; }
};

// Throws ConfigError naming data.path when it does not exist and matches no file as a glob, is a
// DatasetDict directory (dataset_dict.json: the error names its splits, one of which to give), has
// a state.json that is not datasets' or lists a file that is missing, or mixes text files with data
// files in one glob.
DataFiles resolve_data_path(const std::string& path);

}  // namespace fsdpp::data
