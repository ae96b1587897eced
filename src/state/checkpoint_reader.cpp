// Reading a checkpoint's data files through its index. See checkpoint_reader.h.
#include "checkpoint_reader.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::state::detail {

at::ScalarType entry_dtype(const std::string& name, const Entry& e) {
  auto t = safetensors_dtype_from_name(e.dtype);
  FSDPP_CHECK_AS(CheckpointError, t.has_value(), "[state] tensor '{}' has unknown dtype '{}'", name,
                 e.dtype);
  return *t;
}

const SafetensorsFile& CheckpointReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end()) {
    const fs::path p = dir_ / name;
    std::error_code ec;
    FSDPP_CHECK_AS(CheckpointError, fs::exists(p, ec), "[state] checkpoint file '{}' is missing",
                   p.string());
    it = files_.emplace(name, SafetensorsFile::open(p)).first;
  }
  return it->second;
}

std::string CheckpointReader::named(const std::string& file) const {
  return naming_ == Naming::kPath ? (dir_ / file).string() : file;
}

const SafetensorsFile::TensorInfo& CheckpointReader::check_header(const Piece& pc, const Entry& e) {
  const auto& f = file(pc.file);
  FSDPP_CHECK_AS(CheckpointError, f.contains(pc.tensor),
                 "[state] '{}': tensor '{}' is not in the file though {} lists it", named(pc.file),
                 pc.tensor, kIndexFile);
  const auto& info = f.info(pc.tensor);
  int64_t numel = 1;
  for (const int64_t d : info.shape) numel *= d;  // open() checked it against the file
  const int64_t rows = pc.row_end - pc.row_begin;
  const bool same_dtype = e.dtype.empty() || safetensors_dtype_name(info.dtype) == e.dtype;
  FSDPP_CHECK_AS(CheckpointError, numel == rows * e.row_numel && same_dtype,
                 "[state] '{}': tensor '{}' has {} elements of {}; the index says rows [{}, {}) of "
                 "{} elements each, of {}",
                 named(pc.file), pc.tensor, numel, safetensors_dtype_name(info.dtype), pc.row_begin,
                 pc.row_end, e.row_numel, e.dtype.empty() ? "any dtype" : e.dtype);
  return info;
}

at::Tensor CheckpointReader::piece(const Piece& pc, const Entry& e) {
  check_header(pc, e);
  const auto& f = file(pc.file);
  at::Tensor t;
  try {
    t = f.view(pc.tensor);
  } catch (const CheckpointError&) {
    t = f.get(pc.tensor);  // data not aligned to its item size: another writer's file
  }
  if (pc.checksum && verified_.insert({pc.file, pc.tensor}).second) {
    const uint64_t got = checksum(t);
    if (got != *pc.checksum) {
      verified_.erase({pc.file, pc.tensor});
      const auto said = checksum_hex(*pc.checksum), gives = checksum_hex(got);
      if (naming_ == Naming::kIndexName) {
        FSDPP_THROW(CheckpointError,
                    "[state] checksum mismatch in '{}' for tensor '{}' (the index says {}, the data "
                    "gives {}): the file is corrupted",
                    pc.file, pc.tensor, said, gives);
      }
      FSDPP_THROW(CheckpointError,
                  "[state] '{}': checksum mismatch for tensor '{}' (the index says {}, the data "
                  "gives {}); the file is corrupt",
                  named(pc.file), pc.tensor, said, gives);
    }
  }
  return t.reshape({pc.row_end - pc.row_begin, e.row_numel});
}

void CheckpointReader::fill(const std::string& what, const Entry& e, int64_t begin, int64_t rows,
                            const at::Tensor& dst, const std::string& only_file) {
  int64_t covered = 0;
  for (const auto& pc : e.pieces) {
    if (!only_file.empty() && pc.file != only_file) continue;
    const int64_t lo = std::max(begin, pc.row_begin);
    const int64_t hi = std::min(begin + rows, pc.row_end);
    if (lo >= hi) continue;
    auto src = piece(pc, e);
    covered += hi - lo;
    if (dst.defined()) dst.narrow(0, lo - begin, hi - lo).copy_(src.narrow(0, lo - pc.row_begin, hi - lo));
  }
  FSDPP_CHECK_AS(CheckpointError, covered == rows,
                 "[state] '{}': '{}' rows [{}, {}) are needed here but the pieces cover {} of them",
                 dir_.string(), what, begin, begin + rows, covered);
}

at::Tensor CheckpointReader::assemble(const std::string& name, const Entry& e) {
  const auto dtype = entry_dtype(name, e);
  check_rows_tiled(name, e);
  for (const auto& pc : e.pieces) check_header(pc, e);
  auto full = at::empty(e.shape, at::TensorOptions().dtype(dtype));
  auto rows = full.view({e.dim0, e.row_numel});
  for (const auto& pc : e.pieces) {
    rows.narrow(0, pc.row_begin, pc.row_end - pc.row_begin).copy_(piece(pc, e));
  }
  return full;
}

at::Tensor CheckpointReader::buffer(const CheckpointIndex& index, const std::string& name,
                                    const BufferEntry& b) {
  const Entry e = index.buffer_entry(name, b);
  const auto& info = check_header(e.pieces[0], e);
  FSDPP_CHECK_AS(CheckpointError, info.shape == b.shape,
                 "[state] buffer '{}' has shape {} in its file but {} in the index", name, info.shape,
                 b.shape);
  return piece(e.pieces[0], e).reshape(b.shape).clone();
}

}  // namespace fsdpp::state::detail
