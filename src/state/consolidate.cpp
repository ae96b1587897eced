// Offline tools on checkpoint directories: inspect, verify, consolidate, read the full model,
// write a FULL checkpoint from plain tensors. See include/fsdpp/state/consolidate.h.
#include "fsdpp/state/consolidate.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "checkpoint_reader.h"
#include "index_checks.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/output_path.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace fsdpp::state {
namespace detail {

json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  FSDPP_CHECK_AS(CheckpointError, in.good(), "[state] cannot read '{}'", path.string());
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    FSDPP_THROW(CheckpointError, "[state] '{}' is not valid JSON: {}", path.string(), e.what());
  }
}

std::vector<int64_t> entry_shape(const json& e) { return e.at("shape").get<std::vector<int64_t>>(); }

at::ScalarType entry_dtype(const json& e, const std::string& name) {
  const auto s = e.at("dtype").get<std::string>();
  auto t = safetensors_dtype_from_name(s);
  FSDPP_CHECK_AS(CheckpointError, t.has_value(), "[state] tensor '{}' has unknown dtype '{}'", name, s);
  return *t;
}

namespace {
uint64_t parse_checksum(const json& piece, const std::string& tensor_name) {
  const auto text = piece.at("checksum").get<std::string>();
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 16);
  FSDPP_CHECK_AS(CheckpointError, ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                 "[state] a piece of tensor '{}' has checksum '{}'; expected hexadecimal digits",
                 tensor_name, text);
  return v;
}
}  // namespace

CheckpointReader::CheckpointReader(fs::path dir) : dir_(std::move(dir)) {
  FSDPP_CHECK_AS(CheckpointError, fs::is_directory(dir_), "[state] '{}' is not a checkpoint directory",
                 dir_.string());
  const fs::path index = dir_ / "index.json";
  FSDPP_CHECK_AS(CheckpointError, fs::exists(index),
                 "[state] '{}' has no index.json; is it an fsdpp checkpoint?", dir_.string());
  require_regular_file(index, "checkpoint index");
  index_ = read_json_file(index);
  FSDPP_CHECK_AS(CheckpointError, index_.is_object() && index_.contains("params"),
                 "[state] '{}' is not an fsdpp checkpoint index (no \"params\")", index.string());
  check_index_version(index_, index);
}

std::string CheckpointReader::format() const { return index_.value("format", std::string()); }

SafetensorsFile& CheckpointReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end()) {
    const fs::path p = dir_ / checked_file_name(name, dir_ / "index.json");
    FSDPP_CHECK_AS(CheckpointError, fs::exists(p), "[state] checkpoint file '{}' is missing",
                   p.string());
    it = files_.emplace(name, std::make_unique<SafetensorsFile>(SafetensorsFile::open(p))).first;
  }
  return *it->second;
}

at::Tensor CheckpointReader::piece(const json& piece, const std::string& tensor_name) {
  const auto file_name = piece.at("file").get<std::string>();
  const auto stored = piece.value("tensor", tensor_name);
  auto& f = file(file_name);
  FSDPP_CHECK_AS(CheckpointError, f.contains(stored), "[state] '{}' has no tensor '{}'", file_name, stored);
  auto t = f.get(stored);
  FSDPP_CHECK_AS(CheckpointError, checksum(t) == parse_checksum(piece, tensor_name),
                 "[state] checksum mismatch in '{}' for tensor '{}': the file is corrupted",
                 file_name, stored);
  return t;
}

at::Tensor CheckpointReader::assemble(const std::string& name, const json& e) {
  const auto shape = entry_shape(e);
  const auto dtype = entry_dtype(e, name);
  const int64_t dim0 = e.at("dim0").get<int64_t>();
  const int64_t row_numel = e.at("row_numel").get<int64_t>();
  // Everything the index claims is checked against itself and the files before anything is
  // allocated: a corrupt index must give an error, not an allocation of its made-up size.
  int64_t numel = 1;
  for (const int64_t d : shape) {
    FSDPP_CHECK_AS(CheckpointError, d >= 0 && !__builtin_mul_overflow(numel, d, &numel),
                   "[state] tensor '{}' has shape {} in the index; expected sizes >= 0 whose "
                   "product fits in 64 bits",
                   name, shape);
  }
  int64_t rows_numel = 0;
  FSDPP_CHECK_AS(CheckpointError,
                 dim0 >= 0 && row_numel >= 0 && !__builtin_mul_overflow(dim0, row_numel, &rows_numel) &&
                     rows_numel == numel && (shape.empty() ? dim0 == 1 : dim0 == shape[0]),
                 "[state] tensor '{}': dim0 {} x row_numel {} does not match its shape {}", name, dim0,
                 row_numel, shape);
  // The pieces must tile rows [0, dim0) and hold (end - begin) * row_numel elements each.
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& p : e.at("pieces")) {
    const int64_t b = p.at("row_begin").get<int64_t>();
    const int64_t end = p.at("row_end").get<int64_t>();
    FSDPP_CHECK_AS(CheckpointError, 0 <= b && b < end && end <= dim0,
                   "[state] tensor '{}': piece rows [{}, {}) are outside [0, {})", name, b, end, dim0);
    auto& f = file(p.at("file").get<std::string>());
    const auto stored = p.value("tensor", name);
    FSDPP_CHECK_AS(CheckpointError, f.contains(stored), "[state] '{}' has no tensor '{}'",
                   p.at("file").get<std::string>(), stored);
    const auto& info = f.info(stored);
    int64_t piece_numel = 1;
    for (const int64_t d : info.shape) piece_numel *= d;  // open() checked it against the file
    FSDPP_CHECK_AS(CheckpointError, piece_numel == (end - b) * row_numel && info.dtype == dtype,
                   "[state] tensor '{}': piece rows [{}, {}) hold {} {} elements; expected {} {}",
                   name, b, end, piece_numel, c10::toString(info.dtype), (end - b) * row_numel,
                   c10::toString(dtype));
    spans.emplace_back(b, end);
  }
  std::sort(spans.begin(), spans.end());
  int64_t next = 0;
  for (const auto& [b, end] : spans) {
    FSDPP_CHECK_AS(CheckpointError, b >= next, "[state] tensor '{}': row {} is in two pieces", name, b);
    FSDPP_CHECK_AS(CheckpointError, b == next, "[state] tensor '{}': row {} is in no piece", name, next);
    next = end;
  }
  FSDPP_CHECK_AS(CheckpointError, next == dim0, "[state] tensor '{}': row {} is in no piece", name, next);
  auto full = at::empty(shape, at::TensorOptions().dtype(dtype));
  auto rows = full.view({dim0, row_numel});
  for (const auto& p : e.at("pieces")) {
    const int64_t b = p.at("row_begin").get<int64_t>();
    const int64_t end = p.at("row_end").get<int64_t>();
    auto t = piece(p, name);
    rows.narrow(0, b, end - b).copy_(t.reshape({end - b, row_numel}));
  }
  return full;
}

at::Tensor CheckpointReader::buffer(const std::string& name) {
  const auto& b = index_.at("buffers");
  json piece = b.at("tensors").at(name);
  piece["file"] = b.at("file");
  auto t = this->piece(piece, name);
  FSDPP_CHECK_AS(CheckpointError, t.sizes().vec() == entry_shape(piece),
                 "[state] buffer '{}' has shape {} in its file but {} in the index", name,
                 t.sizes().vec(), entry_shape(piece));
  return t;
}

}  // namespace detail

using detail::CheckpointReader;
using detail::entry_dtype;
using detail::entry_shape;

namespace {

bool has_buffers(const json& index) {
  return index.contains("buffers") && index["buffers"].contains("tensors");
}

// The public functions below run their *_impl through this: a field of the index that is missing
// or of the wrong type (nlohmann throws json::exception) becomes a CheckpointError naming the
// index file, as every other problem with a checkpoint does. (Found by fuzz_checkpoint_index.)
template <typename F>
auto index_errors_named(const fs::path& dir, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const json::exception& e) {
    FSDPP_THROW(CheckpointError, "[state] '{}' is malformed: {}", (dir / "index.json").string(),
                e.what());
  }
}

int64_t verify_checkpoint_impl(const fs::path& dir) {
  CheckpointReader r(dir);
  const bool local = r.format() == "fsdpp.local";
  int64_t pieces = 0;
  auto check_entry = [&](const std::string& name, const json& e) {
    if (local) {
      for (const auto& p : e.at("pieces")) {
        r.piece(p, name);
        ++pieces;
      }
    } else {
      r.assemble(name, e);
      pieces += static_cast<int64_t>(e.at("pieces").size());
    }
  };
  for (const auto& [name, e] : r.index().at("params").items()) check_entry(name, e);
  if (r.index().contains("optim")) {
    for (const auto& [fqn, o] : r.index()["optim"].at("params").items()) {
      for (const auto& [k, e] : o.at("states").items()) check_entry("optim." + fqn + "." + k, e);
    }
  }
  if (has_buffers(r.index())) {
    for (const auto& [name, e] : r.index()["buffers"]["tensors"].items()) {
      r.buffer(name);
      ++pieces;
    }
  }
  return pieces;
}

std::string describe_checkpoint_impl(const fs::path& dir, bool verify) {
  const int64_t verified = verify ? verify_checkpoint(dir) : -1;
  CheckpointReader r(dir);
  const json& index = r.index();
  std::ostringstream out;
  const auto format = index.value("format", std::string("?"));
  out << "checkpoint " << dir.string() << "\n"
      << "  format " << format << ", saved on " << index.value("world_size", 0) << " rank(s)\n";
  int64_t numel = 0;
  out << "  parameters:\n";
  for (const auto& [name, e] : index.at("params").items()) {
    const auto shape = entry_shape(e);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    numel += n;
    std::string files;
    for (const auto& p : e.at("pieces")) {
      files += fmt::format(" {}[{}:{}]", p.at("file").get<std::string>(), p.at("row_begin").get<int64_t>(),
                           p.at("row_end").get<int64_t>());
    }
    out << fmt::format("    {} {} {}  ->{}\n", name, fmt::join(shape, "x"), e.at("dtype").get<std::string>(),
                       files);
  }
  out << fmt::format("  {} parameter tensors, {} elements\n", index.at("params").size(), numel);
  if (index.contains("buffers")) {
    out << fmt::format("  {} buffers in {}\n", index["buffers"].at("tensors").size(),
                       index["buffers"].value("file", std::string("?")));
  }
  if (index.contains("optim")) {
    out << fmt::format("  optimizer {} with state for {} parameters\n",
                       index["optim"].value("type", std::string("?")), index["optim"].at("params").size());
  }
  if (verified >= 0) out << fmt::format("  checksums: {} pieces verified, all rows covered\n", verified);
  if (fs::exists(dir / "trainer_state.json")) {
    json ts = detail::read_json_file(dir / "trainer_state.json");
    // The generator states are long and opaque: say how many there are instead.
    if (ts.contains("rng") && ts["rng"].is_object()) {
      json summary = json::object();
      for (const auto& [k, v] : ts["rng"].items()) {
        summary[k] = fmt::format("<{} rank(s)>", v.is_array() ? v.size() : 0);
      }
      ts["rng"] = summary;
    }
    out << "  trainer_state.json: " << ts.dump() << "\n";
  }
  return out.str();
}

int64_t consolidate_checkpoint_impl(const fs::path& dir, const fs::path& out, bool overwrite) {
  check_output_path("consolidate", out, {dir}, OutputKind::kFile, overwrite);
  CheckpointReader r(dir);
  const auto format = r.format();
  FSDPP_CHECK_AS(CheckpointError, format == "fsdpp.sharded" || format == "fsdpp.full",
                 "[state] '{}' is a {} checkpoint; consolidate reads fsdpp.sharded and fsdpp.full "
                 "(LOCAL checkpoints hold padded shards: load one on its world size and save it "
                 "SHARDED)",
                 dir.string(), format.empty() ? "?" : format);
  // Declare everything first so the writer knows the header; then stream one tensor at a time.
  SafetensorsWriter writer(out, {{"format", "pt"}});
  const auto& params = r.index().at("params");
  for (const auto& [name, e] : params.items()) writer.declare(name, entry_dtype(e, name), entry_shape(e));
  if (has_buffers(r.index())) {
    for (const auto& [name, e] : r.index()["buffers"]["tensors"].items()) {
      writer.declare(name, entry_dtype(e, name), entry_shape(e));
    }
  }
  int64_t written = 0;
  for (const auto& [name, e] : params.items()) {
    writer.write(name, r.assemble(name, e));
    ++written;
  }
  if (has_buffers(r.index())) {
    for (const auto& [name, e] : r.index()["buffers"]["tensors"].items()) {
      writer.write(name, r.buffer(name));
      ++written;
    }
  }
  writer.commit();
  return written;
}

std::vector<std::pair<std::string, at::Tensor>> read_full_model_impl(const fs::path& dir) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!fs::exists(dir / "index.json") && fs::exists(dir / "model.safetensors")) {
    auto f = SafetensorsFile::open(dir / "model.safetensors");
    for (const auto& name : f.names()) out.emplace_back(name, f.get(name));
    return out;
  }
  CheckpointReader r(dir);
  const auto format = r.format();
  FSDPP_CHECK_AS(CheckpointError, format == "fsdpp.sharded" || format == "fsdpp.full",
                 "[state] '{}' is a {} checkpoint; only fsdpp.sharded and fsdpp.full hold whole "
                 "tensors (load a LOCAL one on its world size and save it SHARDED)",
                 dir.string(), format.empty() ? "?" : format);
  for (const auto& [name, e] : r.index().at("params").items()) out.emplace_back(name, r.assemble(name, e));
  if (has_buffers(r.index())) {
    for (const auto& [name, e] : r.index()["buffers"]["tensors"].items()) out.emplace_back(name, r.buffer(name));
  }
  return out;
}

}  // namespace

int64_t verify_checkpoint(const fs::path& dir) {
  return index_errors_named(dir, [&] { return verify_checkpoint_impl(dir); });
}

std::string describe_checkpoint(const fs::path& dir, bool verify) {
  return index_errors_named(dir, [&] { return describe_checkpoint_impl(dir, verify); });
}

int64_t consolidate_checkpoint(const fs::path& dir, const fs::path& out, bool overwrite) {
  return index_errors_named(dir, [&] { return consolidate_checkpoint_impl(dir, out, overwrite); });
}

std::vector<std::pair<std::string, at::Tensor>> read_full_model(const fs::path& dir) {
  return index_errors_named(dir, [&] { return read_full_model_impl(dir); });
}

void write_full_checkpoint(const fs::path& dir,
                           const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::vector<std::string>& buffer_names,
                           const std::map<std::string, std::string>& extra_files) {
  const std::set<std::string> buffers(buffer_names.begin(), buffer_names.end());
  AtomicDir adir(dir);
  save_safetensors(adir.path() / "model.safetensors", tensors, {{"format", "pt"}});
  json index;
  index["format"] = "fsdpp.full";
  index["version"] = 1;
  index["world_size"] = 1;
  index["params"] = json::object();
  json bufs = {{"file", "model.safetensors"}, {"tensors", json::object()}};
  for (const auto& [name, t] : tensors) {
    const std::string sum = fmt::format("{:016x}", checksum(t));
    const std::string dtype(safetensors_dtype_name(t.scalar_type()));
    if (buffers.count(name)) {
      bufs["tensors"][name] = {{"shape", t.sizes().vec()}, {"dtype", dtype}, {"checksum", sum}};
      continue;
    }
    const int64_t dim0 = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row_numel = dim0 == 0 ? 0 : t.numel() / dim0;
    index["params"][name] = {
        {"shape", t.sizes().vec()}, {"dtype", dtype}, {"dim0", dim0}, {"row_numel", row_numel},
        {"chunk_rows", dim0},
        {"pieces", json::array()}};
    if (dim0 > 0) {  // an empty tensor has no rows, so no piece
      index["params"][name]["pieces"].push_back({{"file", "model.safetensors"}, {"tensor", name},
                                                 {"row_begin", 0}, {"row_end", dim0}, {"checksum", sum}});
    }
  }
  index["buffers"] = bufs;
  for (const auto& [name, text] : extra_files) {
    std::ofstream f(adir.path() / name, std::ios::binary);
    f << text;
    FSDPP_CHECK_AS(CheckpointError, f.good(), "[state] '{}': cannot write", (adir.path() / name).string());
  }
  {
    std::ofstream f(adir.path() / "index.json");
    f << index.dump(1) << "\n";
    FSDPP_CHECK_AS(CheckpointError, f.good(), "[state] '{}': cannot write",
                   (adir.path() / "index.json").string());
  }
  adir.commit();
}

}  // namespace fsdpp::state
