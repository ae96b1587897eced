#include "fsdpp/data/data_files.h"

#include <glob.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::data {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The files datasets writes beside the data; never data themselves.
bool is_metadata_name(const std::string& name) {
  static constexpr std::array<std::string_view, 4> kNames = {
      "dataset_info.json", "state.json", "dataset_dict.json", "dataset_infos.json"};
  return std::find(kNames.begin(), kNames.end(), name) != kNames.end();
}

bool has_glob_chars(const std::string& path) {
  return path.find_first_of("*?[") != std::string::npos;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// datasets' save_to_disk directory: state.json's "_data_files" are the Arrow shards in order.
DataFiles saved_dataset(const std::string& path, const fs::path& dir) {
  const fs::path state_path = dir / "state.json";
  nlohmann::json state;
  try {
    std::ifstream in(state_path);
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not valid JSON ({}); a directory that datasets' "
                "save_to_disk wrote has a state.json listing its Arrow files", state_path.string(),
                e.what());
  }
  FSDPP_CHECK_AS(ConfigError,
                 state.is_object() && state.contains("_data_files") && state["_data_files"].is_array(),
                 "[data] '{}' has no \"_data_files\" list; expected the state.json of datasets' "
                 "save_to_disk (\"_data_files\": [{{\"filename\": \"data-00000-of-00001.arrow\"}}, ...])",
                 state_path.string());
  DataFiles out{path, {}, true};
  for (const auto& entry : state["_data_files"]) {
    FSDPP_CHECK_AS(ConfigError,
                   entry.is_object() && entry.contains("filename") && entry["filename"].is_string(),
                   "[data] '{}': an entry of \"_data_files\" is {}; expected {{\"filename\": \"...\"}}",
                   state_path.string(), entry.dump());
    const fs::path file = dir / entry["filename"].get<std::string>();
    FSDPP_CHECK_AS(ConfigError, fs::is_regular_file(file),
                   "[data] '{}' lists '{}', which does not exist", state_path.string(), file.string());
    out.files.push_back({file, FileFormat::ARROW, Compression::NONE});
  }
  FSDPP_CHECK_AS(ConfigError, !out.files.empty(),
                 "[data] '{}' lists no data files (\"_data_files\" is empty): the saved dataset is empty",
                 state_path.string());
  return out;
}

// A directory: save_to_disk's, a DatasetDict's (refused), or the data files in it by name.
DataFiles directory(const std::string& path) {
  const fs::path dir(path);
  if (fs::exists(dir / "state.json")) return saved_dataset(path, dir);
  if (fs::exists(dir / "dataset_dict.json")) {
    std::vector<std::string> splits;
    try {
      std::ifstream in(dir / "dataset_dict.json");
      const auto dict = nlohmann::json::parse(in);
      for (const auto& s : dict.at("splits")) splits.push_back(s.get<std::string>());
    } catch (const nlohmann::json::exception&) {
    }
    FSDPP_THROW(ConfigError, "[data] data.path '{}' is a DatasetDict (dataset_dict.json, splits: {}); "
                "give one split's directory, e.g. '{}'", path, splits.empty() ? "?" : join_names(splits),
                (dir / (splits.empty() ? "train" : splits.front())).string());
  }
  std::vector<fs::path> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") || is_metadata_name(name) || !entry.is_regular_file()) continue;
    names.push_back(entry.path());
  }
  FSDPP_CHECK_AS(ConfigError, !ec, "[data] cannot list data.path '{}': {}", path, ec.message());
  std::sort(names.begin(), names.end());
  DataFiles out{path, {}, false};
  for (const auto& n : names) {
    DataFile f = data_file(n);
    if (f.format != FileFormat::TEXT) out.files.push_back(std::move(f));
  }
  // No data file: a directory of text files, which the caller's text route reads.
  if (out.files.empty()) out.files.push_back({dir, FileFormat::TEXT, Compression::NONE});
  return out;
}

DataFiles globbed(const std::string& path) {
  glob_t g{};
  const int rc = ::glob(path.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
  ::globfree(&g);
  FSDPP_CHECK_AS(ConfigError, rc == 0 || rc == GLOB_NOMATCH,
                 "[data] cannot expand the glob data.path '{}' (glob(3) returned {})", path, rc);
  // Byte order, not the locale's: the same order on every machine.
  std::sort(matches.begin(), matches.end());
  DataFiles out{path, {}, false};
  std::vector<std::string> text, data;
  for (const auto& m : matches) {
    if (!fs::is_regular_file(m)) continue;
    DataFile f = data_file(m);
    (f.format == FileFormat::TEXT ? text : data).push_back(m);
    out.files.push_back(std::move(f));
  }
  FSDPP_CHECK_AS(ConfigError, !out.files.empty(),
                 "[data] data.path '{}' does not exist and, as a glob, matches no file", path);
  FSDPP_CHECK_AS(ConfigError, text.empty() || data.empty(),
                 "[data] the glob data.path '{}' matches text files ({}) and data files ({}); a "
                 "data.path is one or the other: narrow the glob", path, text.front(), data.front());
  return out;
}

}  // namespace

std::string_view format_name(FileFormat format) {
  switch (format) {
    case FileFormat::TEXT: return "text";
    case FileFormat::JSON: return "json";
    case FileFormat::PARQUET: return "parquet";
    case FileFormat::ARROW: return "arrow";
  }
  return "?";
}

std::string_view compression_name(Compression compression) {
  switch (compression) {
    case Compression::NONE: return "none";
    case Compression::GZIP: return "gzip";
    case Compression::ZSTD: return "zstd";
  }
  return "?";
}

DataFile data_file(const fs::path& path) {
  std::string name = lower(path.filename().string());
  Compression compression = Compression::NONE;
  for (const auto& [suffix, c] : {std::pair<std::string_view, Compression>{".gz", Compression::GZIP},
                                  {".zst", Compression::ZSTD}, {".zstd", Compression::ZSTD}}) {
    if (ends_with(name, suffix)) {
      compression = c;
      name.resize(name.size() - suffix.size());
      break;
    }
  }
  FileFormat format = FileFormat::TEXT;
  if (ends_with(name, ".jsonl") || ends_with(name, ".json") || ends_with(name, ".ndjson")) {
    format = FileFormat::JSON;
  } else if (ends_with(name, ".parquet")) {
    format = FileFormat::PARQUET;
  } else if (ends_with(name, ".arrow")) {
    format = FileFormat::ARROW;
  }
  if (format == FileFormat::TEXT) return {path, FileFormat::TEXT, Compression::NONE};
  FSDPP_CHECK_AS(ConfigError, compression == Compression::NONE || format == FileFormat::JSON,
                 "[data] '{}' is a {}-compressed {} file, which is not read: {} compresses inside "
                 "the file; decompress it, or compress JSON Lines (.jsonl.gz, .jsonl.zst)",
                 path.string(), compression_name(compression), format_name(format), format_name(format));
  return {path, format, compression};
}

DataFiles resolve_data_path(const std::string& path) {
  FSDPP_CHECK_AS(ConfigError, !path.empty(),
                 "[data] data.path is empty; give a file, a directory or a glob of data files");
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (fs::is_directory(status)) return directory(path);
  if (fs::exists(status)) return DataFiles{path, {data_file(path)}, false};
  FSDPP_CHECK_AS(ConfigError, has_glob_chars(path),
                 "[data] data.path '{}' does not exist; give a file, a directory or a glob of "
                 "data files (.jsonl, .json, .parquet, .arrow, optionally .gz/.zst for JSON) or text",
                 path);
  return globbed(path);
}

}  // namespace fsdpp::data
