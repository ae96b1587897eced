// Offline tools on checkpoint directories: inspect, verify, consolidate, read the full model,
// write a FULL checkpoint from plain tensors. See include/fsdpp/state/consolidate.h.
#include "fsdpp/state/consolidate.h"

#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "checkpoint_index.h"
#include "checkpoint_reader.h"
#include "fsdpp/common/error.h"
#include "fsdpp/common/escaped_bytes.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/output_path.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;

namespace fsdpp::state {
namespace {

using namespace detail;

bool is_local(const CheckpointIndex& ix) { return ix.format == kFormatLocal; }
std::string format_or_unknown(const CheckpointIndex& ix) { return ix.format.empty() ? "?" : ix.format; }

// Only SHARDED and FULL checkpoints hold whole tensors in rows.
void require_rows(const fs::path& dir, const CheckpointIndex& ix, const char* what) {
  FSDPP_CHECK_AS(CheckpointError, ix.format == kFormatSharded || ix.format == kFormatFull,
                 "[state] '{}' is a {} checkpoint; {}", dir.string(), format_or_unknown(ix), what);
}

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  FSDPP_CHECK_AS(CheckpointError, in.good(), "[state] cannot read '{}'", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    FSDPP_THROW(CheckpointError, "[state] '{}' is not valid JSON: {}", path.string(),
                escaped_bytes(e.what()));
  }
}

}  // namespace

int64_t verify_checkpoint(const fs::path& dir) {
  const auto ix = read_index(dir);
  CheckpointReader r(dir, CheckpointReader::Naming::kIndexName);
  int64_t pieces = 0;
  auto check = [&](const std::string& name, const Entry& e) {
    if (is_local(ix)) {  // padded shards, not rows of the tensor: each piece on its own
      for (const auto& p : e.pieces) r.piece(p, e);
    } else {
      r.assemble(name, e);
    }
    pieces += static_cast<int64_t>(e.pieces.size());
  };
  for (const auto& [name, e] : ix.params) check(name, e);
  for (const auto& [fqn, o] : ix.optim) {
    for (const auto& [k, e] : o.states) check(optim_tensor_name(fqn, k), e);
  }
  for (const auto& [name, b] : ix.buffers) {
    r.buffer(ix, name, b);
    ++pieces;
  }
  return pieces;
}

std::string describe_checkpoint(const fs::path& dir, bool verify) {
  const int64_t verified = verify ? verify_checkpoint(dir) : -1;
  const auto ix = read_index(dir);
  std::ostringstream out;
  out << "checkpoint " << dir.string() << "\n"
      << "  format " << format_or_unknown(ix) << ", saved on " << ix.world_size << " rank(s)\n";
  int64_t numel = 0;
  out << "  parameters:\n";
  for (const auto& [name, e] : ix.params) {
    numel += e.numel();
    std::string files;
    for (const auto& p : e.pieces) files += fmt::format(" {}[{}:{}]", p.file, p.row_begin, p.row_end);
    out << fmt::format("    {} {} {}  ->{}\n", name, fmt::join(e.shape, "x"), e.dtype, files);
  }
  out << fmt::format("  {} parameter tensors, {} elements\n", ix.params.size(), numel);
  if (ix.buffers_file) out << fmt::format("  {} buffers in {}\n", ix.buffers.size(), *ix.buffers_file);
  if (ix.optim_type) {
    out << fmt::format("  optimizer {} with state for {} parameters\n", *ix.optim_type, ix.optim.size());
  }
  if (verified >= 0) out << fmt::format("  checksums: {} pieces verified, all rows covered\n", verified);
  if (fs::exists(dir / "trainer_state.json")) {
    auto ts = read_json_file(dir / "trainer_state.json");
    // The generator states are long and opaque: say how many there are instead.
    if (ts.contains("rng") && ts["rng"].is_object()) {
      auto summary = nlohmann::json::object();
      for (const auto& [k, v] : ts["rng"].items()) {
        summary[k] = fmt::format("<{} rank(s)>", v.is_array() ? v.size() : 0);
      }
      ts["rng"] = summary;
    }
    out << "  trainer_state.json: " << ts.dump() << "\n";
  }
  return out.str();
}

int64_t consolidate_checkpoint(const fs::path& dir, const fs::path& out, bool overwrite) {
  check_output_path("consolidate", out, {dir}, OutputKind::kFile, overwrite);
  const auto ix = read_index(dir);
  require_rows(dir, ix, "consolidate reads fsdpp.sharded and fsdpp.full (LOCAL checkpoints hold "
                        "padded shards: load one on its world size and save it SHARDED)");
  CheckpointReader r(dir, CheckpointReader::Naming::kIndexName);
  // Declare everything first so the writer knows the header; then stream one tensor at a time.
  SafetensorsWriter writer(out, {{"format", "pt"}});
  for (const auto& [name, e] : ix.params) writer.declare(name, entry_dtype(name, e), e.shape);
  for (const auto& [name, b] : ix.buffers) {
    writer.declare(name, entry_dtype(name, ix.buffer_entry(name, b)), b.shape);
  }
  int64_t written = 0;
  for (const auto& [name, e] : ix.params) {
    writer.write(name, r.assemble(name, e));
    ++written;
  }
  for (const auto& [name, b] : ix.buffers) {
    writer.write(name, r.buffer(ix, name, b));
    ++written;
  }
  writer.commit();
  return written;
}

std::vector<std::pair<std::string, at::Tensor>> read_full_model(const fs::path& dir) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!fs::exists(dir / kIndexFile) && fs::exists(dir / kModelFile)) {
    auto f = SafetensorsFile::open(dir / kModelFile);
    for (const auto& name : f.names()) out.emplace_back(name, f.get(name));
    return out;
  }
  const auto ix = read_index(dir);
  require_rows(dir, ix, "only fsdpp.sharded and fsdpp.full hold whole tensors (load a LOCAL one on "
                        "its world size and save it SHARDED)");
  CheckpointReader r(dir, CheckpointReader::Naming::kIndexName);
  for (const auto& [name, e] : ix.params) out.emplace_back(name, r.assemble(name, e));
  for (const auto& [name, b] : ix.buffers) out.emplace_back(name, r.buffer(ix, name, b));
  return out;
}

void write_full_checkpoint(const fs::path& dir,
                           const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::vector<std::string>& buffer_names,
                           const std::map<std::string, std::string>& extra_files) {
  const std::set<std::string> buffers(buffer_names.begin(), buffer_names.end());
  AtomicDir adir(dir);
  save_safetensors(adir.path() / kModelFile, tensors, {{"format", "pt"}});
  CheckpointIndex ix;
  ix.format = kFormatFull;
  ix.world_size = 1;
  ix.buffers_file = kModelFile;
  for (const auto& [name, t] : tensors) {
    if (buffers.count(name)) {
      ix.buffers.emplace_back(name, BufferEntry::of(t));
      continue;
    }
    auto e = Entry::whole(t.sizes().vec(), std::string(safetensors_dtype_name(t.scalar_type())),
                          kModelFile, name, checksum(t));
    if (e.dim0 == 0) e.pieces.clear();  // an empty tensor has no rows, so no piece
    ix.params.emplace_back(name, std::move(e));
  }
  write_extra_files(adir.path(), extra_files);
  write_index(adir.path(), ix, KeyOrder::kSorted);
  adir.commit();
}

}  // namespace fsdpp::state
