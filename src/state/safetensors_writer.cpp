// SafetensorsWriter: declare every tensor, write each from tensor memory with pwrite, commit
// atomically.
#include "fsdpp/state/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "safetensors_format.h"

namespace fs = std::filesystem;

namespace fsdpp::state {
namespace {

using json = nlohmann::json;
using namespace safetensors_detail;

void pwrite_all(int fd, const void* data, uint64_t nbytes, uint64_t offset,
                const fs::path& path) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    // Linux writes at most ~2 GiB per call; ask for 1 GiB at a time.
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(nbytes, uint64_t{1} << 30));
    const ssize_t n = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      FSDPP_THROW(CheckpointError, "[state] cannot write {} bytes at offset {} of '{}': {}", chunk,
                  offset, path.string(), n < 0 ? std::strerror(errno) : "wrote nothing");
    p += n;
    offset += static_cast<uint64_t>(n);
    nbytes -= static_cast<uint64_t>(n);
  }
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(fs::path path, std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tmp_path_(unique_tmp_path(path_)), metadata_(std::move(metadata)) {
  // Created now, not at commit, so that a missing directory or a read-only disk is reported
  // before the caller has gathered any tensor.
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    FSDPP_THROW(CheckpointError, "[state] cannot create '{}' (to become '{}'): {}",
                tmp_path_.string(), path_.string(), std::strerror(errno));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void SafetensorsWriter::declare(const std::string& name, at::ScalarType dtype,
                                c10::IntArrayRef shape) {
  FSDPP_CHECK_AS(CheckpointError, !header_written_,
                 "[state] '{}': tensor '{}' declared after the first write(); declare every "
                 "tensor first",
                 path_.string(), name);
  FSDPP_CHECK_AS(CheckpointError, !name.empty() && name != kMetadataKey,
                 "[state] '{}': '{}' is not a valid tensor name", path_.string(), name);
  FSDPP_CHECK_AS(CheckpointError, !index_.contains(name),
                 "[state] '{}': tensor '{}' is declared twice", path_.string(), name);
  safetensors_dtype_name(dtype);  // throws for an unsupported dtype
  const auto nbytes = byte_size(shape, dtype);
  FSDPP_CHECK_AS(CheckpointError, nbytes.has_value(),
                 "[state] '{}': tensor '{}' has shape {}; expected non-negative sizes whose "
                 "byte count fits 64 bits",
                 path_.string(), name, shape_string(shape));
  index_.emplace(name, entries_.size());
  entries_.push_back(Entry{name, dtype, shape.vec(), *nbytes, 0, false});
}

void SafetensorsWriter::write_header() {
  // Largest item size first, declared order within a size: every tensor starts aligned to its
  // item size (the header length is a multiple of 8 and the mapping is page-aligned).
  std::vector<size_t> order(entries_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return c10::elementSize(entries_[a].dtype) > c10::elementSize(entries_[b].dtype);
  });
  uint64_t offset = 0;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header[kMetadataKey] = metadata_;
  for (size_t i : order) {
    Entry& e = entries_[i];
    e.begin = offset;
    offset += e.nbytes;
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, offset}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& ex) {
    FSDPP_THROW(CheckpointError, "[state] '{}': a tensor name or metadata string is not valid "
                "UTF-8: {}", path_.string(), ex.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::array<char, 8> prefix;
  std::memcpy(prefix.data(), &n, 8);
  pwrite_all(fd_, prefix.data(), 8, 0, tmp_path_);
  pwrite_all(fd_, text.data(), n, 8, tmp_path_);
  data_start_ = 8 + n;
  // The final size now, so that zero-byte tensors at the end and any write order agree with it.
  if (::ftruncate(fd_, static_cast<off_t>(data_start_ + offset)) != 0)
    FSDPP_THROW(CheckpointError, "[state] cannot size '{}' to {} bytes: {}", tmp_path_.string(),
                data_start_ + offset, std::strerror(errno));
  header_written_ = true;
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& tensor) {
  FSDPP_CHECK_AS(CheckpointError, !committed_, "[state] '{}': write('{}') after commit()",
                 path_.string(), name);
  const auto it = index_.find(name);
  FSDPP_CHECK_AS(CheckpointError, it != index_.end(),
                 "[state] '{}': tensor '{}' was never declared", path_.string(), name);
  Entry& e = entries_[it->second];
  FSDPP_CHECK_AS(CheckpointError, !e.written, "[state] '{}': tensor '{}' is written twice",
                 path_.string(), name);
  FSDPP_CHECK_AS(CheckpointError, tensor.defined() && tensor.layout() == at::kStrided,
                 "[state] '{}': tensor '{}' is undefined or not a dense (strided) tensor",
                 path_.string(), name);
  FSDPP_CHECK_AS(CheckpointError, tensor.scalar_type() == e.dtype && tensor.sizes() == e.shape,
                 "[state] '{}': tensor '{}' was declared {} {} but is {} {}", path_.string(),
                 name, c10::toString(e.dtype), shape_string(e.shape),
                 c10::toString(tensor.scalar_type()), shape_string(tensor.sizes()));
  if (!header_written_) write_header();
  const at::Tensor cpu = cpu_contiguous(tensor);
  if (e.nbytes > 0) pwrite_all(fd_, cpu.data_ptr(), e.nbytes, data_start_ + e.begin, tmp_path_);
  e.written = true;
}

void SafetensorsWriter::commit() {
  FSDPP_CHECK_AS(CheckpointError, !committed_, "[state] '{}' is already committed",
                 path_.string());
  for (const Entry& e : entries_)
    FSDPP_CHECK_AS(CheckpointError, e.written,
                   "[state] '{}': tensor '{}' was declared but never written", path_.string(),
                   e.name);
  if (!header_written_) write_header();
  // fsync, rename over path_, fsync of the directory; failing there, the checkpoint was not
  // written.
  try {
    commit_file_atomically(UniqueFd(std::exchange(fd_, -1)), tmp_path_, path_, "state");
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
  committed_ = true;
}

void save_safetensors(const fs::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer(path, metadata);
  for (const auto& [name, t] : tensors) {
    FSDPP_CHECK_AS(CheckpointError, t.defined(), "[state] '{}': tensor '{}' is undefined",
                   path.string(), name);
    writer.declare(name, t.scalar_type(), t.sizes());
  }
  for (const auto& [name, t] : tensors) writer.write(name, t);
  writer.commit();
}

}  // namespace fsdpp::state
