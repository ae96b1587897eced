// A checkpoint's index.json: names, types, reading with every check, writing. See
// checkpoint_index.h.
#include "checkpoint_index.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/common/escaped_bytes.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;

namespace fsdpp::state::detail {

const char* format_name(StateDictType type) {
  switch (type) {
    case StateDictType::SHARDED: return kFormatSharded;
    case StateDictType::FULL: return kFormatFull;
    case StateDictType::LOCAL: return kFormatLocal;
  }
  return "?";
}

std::string rank_file(bool local, int64_t rank) {
  return fmt::format("{}-{}.safetensors", local ? "local" : "shard", rank);
}

std::string optim_tensor_name(const std::string& fqn, const std::string& state) {
  return "optim." + fqn + "." + state;
}

std::string optim_step_name(const std::string& fqn) { return "optim." + fqn + ".step"; }

std::string checksum_hex(uint64_t sum) { return fmt::format("{:016x}", sum); }

Entry Entry::whole(std::vector<int64_t> shape, std::string dtype, std::string file,
                   std::string tensor, std::optional<uint64_t> checksum) {
  Entry e;
  e.shape = std::move(shape);
  e.dtype = std::move(dtype);
  e.dim0 = e.shape.empty() ? 1 : e.shape[0];
  int64_t numel = 1;
  for (auto d : e.shape) numel *= d;
  e.row_numel = e.dim0 == 0 ? 0 : numel / e.dim0;
  e.chunk_rows = e.dim0;
  e.pieces.push_back({std::move(file), std::move(tensor), 0, e.dim0, checksum});
  return e;
}

BufferEntry BufferEntry::of(const at::Tensor& t) {
  return {t.sizes().vec(), std::string(safetensors_dtype_name(t.scalar_type())), state::checksum(t)};
}

Entry CheckpointIndex::buffer_entry(const std::string& name, const BufferEntry& b) const {
  return Entry::whole(b.shape, b.dtype, buffers_file.value_or(""), name, b.checksum);
}

// ---------------------------------------------------------------------------------------------
// Reading

namespace {

using json = nlohmann::json;  // objects sorted by key: entries come out in name order

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

// Reading one index file; every error names it.
struct IndexReader {
  fs::path path;

  // A data file named by the index must lie inside the checkpoint directory: a relative path
  // with no ".." component (checked lexically, so a checkpoint stays readable wherever it is
  // copied).
  std::string file_name(const json& j) const {
    const auto name = j.get<std::string>();
    const fs::path p(name);
    bool inside = !name.empty() && !p.is_absolute() && !p.has_root_path();
    for (const auto& part : p) inside = inside && part != "..";
    FSDPP_CHECK_AS(CheckpointError, inside,
                   "[state] '{}' names the data file '{}'; expected a file name inside the "
                   "checkpoint directory (no absolute path, no '..')",
                   path.string(), name);
    return name;
  }

  uint64_t checksum(const json& j, const std::string& tensor) const {
    const auto text = j.get<std::string>();
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 16);
    FSDPP_CHECK_AS(CheckpointError, ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                   "[state] '{}': a piece of tensor '{}' has checksum '{}'; expected hexadecimal "
                   "digits",
                   path.string(), tensor, text);
    return v;
  }

  // A whole number that fits in int64_t: nlohmann's get<int64_t>() of a float or of a larger
  // unsigned value is undefined behaviour, not an error (found by fuzz_checkpoint_index).
  static bool fits_int64(const json& v) {
    return v.is_number_integer() &&
           (!v.is_number_unsigned() ||
            v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  }

  int64_t integer(const json& j, const char* field, const std::string& name) const {
    const json& v = j.at(field);
    FSDPP_CHECK_AS(CheckpointError, fits_int64(v),
                   "[state] '{}': tensor '{}' has {} {}; expected a whole number", path.string(), name,
                   field, v.dump());
    return v.get<int64_t>();
  }

  std::vector<int64_t> shape(const json& j, const std::string& name) const {
    FSDPP_CHECK_AS(CheckpointError, j.is_array(),
                   "[state] '{}': tensor '{}' has shape {}; expected a list of sizes", path.string(),
                   name, j.dump());
    std::vector<int64_t> s;
    for (const auto& d : j) {
      FSDPP_CHECK_AS(CheckpointError, fits_int64(d),
                     "[state] '{}': tensor '{}' has shape {}; expected whole-number sizes",
                     path.string(), name, j.dump());
      s.push_back(d.get<int64_t>());
    }
    int64_t numel = 1;
    for (const int64_t d : s) {
      FSDPP_CHECK_AS(CheckpointError, d >= 0 && !__builtin_mul_overflow(numel, d, &numel),
                     "[state] '{}': tensor '{}' has shape {}; expected sizes >= 0 whose product "
                     "fits in 64 bits",
                     path.string(), name, s);
    }
    return s;
  }

  Entry entry(const json& j, const std::string& name) const {
    Entry e;
    e.shape = shape(j.at("shape"), name);
    if (j.contains("dtype")) e.dtype = j.at("dtype").get<std::string>();
    e.dim0 = integer(j, "dim0", name);
    e.row_numel = integer(j, "row_numel", name);
    if (j.contains("chunk_rows")) e.chunk_rows = integer(j, "chunk_rows", name);
    int64_t numel = 1, rows_numel = 0;
    for (auto d : e.shape) numel *= d;
    FSDPP_CHECK_AS(CheckpointError,
                   e.dim0 >= 0 && e.row_numel >= 0 &&
                       !__builtin_mul_overflow(e.dim0, e.row_numel, &rows_numel) && rows_numel == numel &&
                       (e.shape.empty() ? e.dim0 == 1 : e.dim0 == e.shape[0]),
                   "[state] '{}': tensor '{}': dim0 {} x row_numel {} does not match its shape {}",
                   path.string(), name, e.dim0, e.row_numel, e.shape);
    for (const auto& p : j.at("pieces")) {
      Piece pc;
      pc.file = file_name(p.at("file"));
      pc.tensor = p.contains("tensor") ? p.at("tensor").get<std::string>() : name;
      pc.row_begin = integer(p, "row_begin", name);
      pc.row_end = integer(p, "row_end", name);
      FSDPP_CHECK_AS(CheckpointError,
                     0 <= pc.row_begin && pc.row_begin < pc.row_end && pc.row_end <= e.dim0,
                     "[state] '{}': tensor '{}': piece rows [{}, {}) are outside [0, {})",
                     path.string(), name, pc.row_begin, pc.row_end, e.dim0);
      pc.checksum = checksum(p.at("checksum"), name);
      e.pieces.push_back(std::move(pc));
    }
    return e;
  }

  CheckpointIndex index(const json& j) const {
    if (j.is_object() && j.contains("version")) {
      const auto& v = j.at("version");
      FSDPP_CHECK_AS(CheckpointError, v.is_number_integer() && v.get<int64_t>() == kIndexVersion,
                     "[state] '{}' has version {}; this build of fsdpp reads version {} only (a "
                     "checkpoint written by a newer fsdpp, or a corrupt index)",
                     path.string(), v.dump(), kIndexVersion);
    }
    FSDPP_CHECK_AS(CheckpointError, j.is_object() && j.contains("params"),
                   "[state] '{}' is not an fsdpp checkpoint index (no \"params\")", path.string());
    CheckpointIndex ix;
    if (j.contains("format")) ix.format = j.at("format").get<std::string>();
    if (j.contains("world_size")) ix.world_size = integer(j, "world_size", "(index)");
    for (const auto& [name, e] : j.at("params").items()) ix.params.emplace_back(name, entry(e, name));
    if (j.contains("buffers")) {
      const auto& b = j.at("buffers");
      ix.buffers_file = file_name(b.at("file"));
      for (const auto& [name, e] : b.at("tensors").items()) {
        BufferEntry be;
        be.shape = shape(e.at("shape"), name);
        if (e.contains("dtype")) be.dtype = e.at("dtype").get<std::string>();
        be.checksum = checksum(e.at("checksum"), name);
        ix.buffers.emplace_back(name, std::move(be));
      }
    }
    if (j.contains("optim")) {
      const auto& o = j.at("optim");
      ix.optim_type = o.at("type").get<std::string>();
      for (const auto& [fqn, op] : o.at("params").items()) {
        OptimEntry oe;
        oe.step = integer(op, "step", fqn);
        for (const auto& [k, e] : op.at("states").items()) {
          oe.states.emplace_back(k, entry(e, optim_tensor_name(fqn, k)));
        }
        ix.optim.emplace_back(fqn, std::move(oe));
      }
    }
    return ix;
  }
};

}  // namespace

void require_regular_file(const fs::path& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    FSDPP_THROW(CheckpointError, "[state] cannot read {} '{}': {}", what, path.string(),
                std::strerror(errno));
  FSDPP_CHECK_AS(CheckpointError, S_ISREG(st.st_mode), "[state] {} '{}' is {}; expected a regular file",
                 what, path.string(), kind_of(st.st_mode));
}

CheckpointIndex read_index(const fs::path& dir) {
  const IndexReader r{dir / kIndexFile};
  FSDPP_CHECK_AS(CheckpointError, fs::is_directory(dir), "[state] '{}' is not a checkpoint directory",
                 dir.string());
  FSDPP_CHECK_AS(CheckpointError, fs::exists(r.path),
                 "[state] '{}' has no index.json; is it an fsdpp checkpoint?", dir.string());
  require_regular_file(r.path, "checkpoint index");
  std::ifstream in(r.path);
  FSDPP_CHECK_AS(CheckpointError, in.good(), "[state] cannot read '{}'", r.path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    FSDPP_THROW(CheckpointError, "[state] '{}' is not valid JSON: {}", r.path.string(),
                escaped_bytes(e.what()));
  }
  try {
    return r.index(j);
  } catch (const json::exception& e) {
    // A field missing or of the wrong type.
    FSDPP_THROW(CheckpointError, "[state] '{}': malformed index: {}", r.path.string(), e.what());
  }
}

void check_rows_tiled(const std::string& name, const Entry& e) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& p : e.pieces) spans.emplace_back(p.row_begin, p.row_end);
  std::sort(spans.begin(), spans.end());
  int64_t next = 0;
  for (const auto& [b, end] : spans) {
    FSDPP_CHECK_AS(CheckpointError, b >= next, "[state] tensor '{}': row {} is in two pieces", name, b);
    FSDPP_CHECK_AS(CheckpointError, b == next, "[state] tensor '{}': row {} is in no piece", name, next);
    next = end;
  }
  FSDPP_CHECK_AS(CheckpointError, next == e.dim0, "[state] tensor '{}': row {} is in no piece", name, next);
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json entry_json(const Entry& e) {
  ordered_json j;
  j["shape"] = e.shape;
  j["dtype"] = e.dtype;
  j["dim0"] = e.dim0;
  j["row_numel"] = e.row_numel;
  if (e.chunk_rows) j["chunk_rows"] = *e.chunk_rows;
  j["pieces"] = ordered_json::array();
  for (const auto& p : e.pieces) {
    j["pieces"].push_back({{"file", p.file},
                           {"tensor", p.tensor},
                           {"row_begin", p.row_begin},
                           {"row_end", p.row_end},
                           {"checksum", checksum_hex(p.checksum.value_or(0))}});
  }
  return j;
}

ordered_json index_json(const CheckpointIndex& ix) {
  ordered_json j;
  j["format"] = ix.format;
  j["version"] = kIndexVersion;
  j["world_size"] = ix.world_size;
  j["params"] = ordered_json::object();
  for (const auto& [name, e] : ix.params) j["params"][name] = entry_json(e);
  if (ix.optim_type) {
    auto& o = j["optim"];
    o["type"] = *ix.optim_type;
    o["params"] = ordered_json::object();
    for (const auto& [fqn, oe] : ix.optim) {
      auto& op = o["params"][fqn];
      op["step"] = oe.step;
      op["states"] = ordered_json::object();
      for (const auto& [k, e] : oe.states) op["states"][k] = entry_json(e);
    }
  }
  if (ix.buffers_file) {
    auto& b = j["buffers"];
    b["file"] = *ix.buffers_file;
    b["tensors"] = ordered_json::object();
    for (const auto& [name, be] : ix.buffers) {
      b["tensors"][name] = {{"shape", be.shape},
                            {"dtype", be.dtype},
                            {"checksum", checksum_hex(be.checksum.value_or(0))}};
    }
  }
  return j;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  FSDPP_CHECK_AS(CheckpointError, f.good(), "[state] '{}': cannot write", path.string());
}

}  // namespace

void write_index(const fs::path& dir, const CheckpointIndex& index, KeyOrder order) {
  const auto j = index_json(index);
  std::string text = order == KeyOrder::kSorted ? json::parse(j.dump()).dump(1) : j.dump(1);
  write_text(dir / kIndexFile, text + "\n");
}

void write_extra_files(const fs::path& dir, const std::map<std::string, std::string>& files) {
  for (const auto& [name, text] : files) {
    FSDPP_CHECK_AS(CheckpointError,
                   !name.empty() && name.find('/') == std::string::npos && name != kIndexFile,
                   "[state] extra checkpoint file name '{}' is not a plain file name (or is {})",
                   name, kIndexFile);
    write_text(dir / name, text);
  }
}

}  // namespace fsdpp::state::detail
