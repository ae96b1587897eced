// SafetensorsFile: the header checked field by field before any offset is trusted; tensors read
// (whole or some rows) with pread, or viewed through a mapping of their own bytes.
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
#include "fsdpp/common/escaped_bytes.h"
#include "fsdpp/common/unique_fd.h"
#include "fsdpp/state/atomic_dir.h"
#include "safetensors_format.h"

namespace fs = std::filesystem;

namespace fsdpp::state {
namespace {

using json = nlohmann::json;
using namespace safetensors_detail;

// Reads exactly `n` bytes at `offset`; false at end of file.
bool read_at(int fd, char* dst, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    dst += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace

// Only the header is read when the file is opened; tensors are read (pread) or mapped (view)
// one at a time, so a process holds the bytes of the tensors it asks for, not the file's.
struct SafetensorsFile::Impl {
  fs::path path;
  UniqueFd fd;
  uint64_t data_start = 0;  // file offset of the data area
  uint64_t data_size = 0;
  std::vector<std::string> names;  // data offset order
  std::map<std::string, TensorInfo> infos;
  std::map<std::string, std::string> metadata;

  const TensorInfo& find(const std::string& name) const {
    const auto it = infos.find(name);
    if (it == infos.end())
      FSDPP_THROW(CheckpointError, "[state] '{}' has no tensor '{}' ({} tensors in the file)",
                  path.string(), name, infos.size());
    return it->second;
  }
  // `n` bytes of the data area from `begin` into dst.
  void read(const std::string& name, char* dst, uint64_t begin, uint64_t n) const {
    if (n == 0) return;
    if (!read_at(fd.get(), dst, n, data_start + begin))
      FSDPP_THROW(CheckpointError, "[state] '{}': reading {} bytes of tensor '{}' failed: {}",
                  path.string(), n, name, errno != 0 ? std::strerror(errno) : "end of file (the file shrank?)");
  }
};

namespace {

// One tensor entry of the header, checked field by field.
SafetensorsFile::TensorInfo parse_entry(const fs::path& path, const std::string& name,
                                        const json& entry, uint64_t data_size) {
  const std::string file = path.string();
  if (!entry.is_object())
    FSDPP_THROW(CheckpointError, "[state] '{}': tensor '{}': expected an object, found {}", file,
                name, entry.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field))
      FSDPP_THROW(CheckpointError, "[state] '{}': tensor '{}' has no '{}' field", file, name,
                  field);

  SafetensorsFile::TensorInfo info;
  const json& dtype = entry["dtype"];
  if (!dtype.is_string())
    FSDPP_THROW(CheckpointError, "[state] '{}': tensor '{}': dtype is a {}, expected a string",
                file, name, dtype.type_name());
  const auto st = safetensors_dtype_from_name(dtype.get_ref<const std::string&>());
  if (!st)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': tensor '{}' has unknown dtype '{}'; expected one of F32, F16, "
                "BF16, F64, I64, I32, I16, I8, U8, BOOL",
                file, name, dtype.get_ref<const std::string&>());
  info.dtype = *st;

  const json& shape = entry["shape"];
  if (!shape.is_array())
    FSDPP_THROW(CheckpointError, "[state] '{}': tensor '{}': shape is a {}, expected an array",
                file, name, shape.type_name());
  for (const json& d : shape) {
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      FSDPP_THROW(CheckpointError,
                  "[state] '{}': tensor '{}': shape {} holds {}; expected non-negative integers",
                  file, name, shape.dump(), d.dump());
    info.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    FSDPP_THROW(CheckpointError,
                "[state] '{}': tensor '{}': data_offsets is {}; expected [begin, end] as two "
                "non-negative integers",
                file, name, offsets.dump());
  info.data_begin = offsets[0].get<uint64_t>();
  info.data_end = offsets[1].get<uint64_t>();
  if (info.data_begin > info.data_end || info.data_end > data_size)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': tensor '{}': data_offsets [{}, {}] lie outside the data area of "
                "{} bytes (or end before they begin); truncated file?",
                file, name, info.data_begin, info.data_end, data_size);
  const auto nbytes = byte_size(info.shape, info.dtype);
  if (!nbytes || *nbytes != info.nbytes())
    FSDPP_THROW(CheckpointError,
                "[state] '{}': tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}] span "
                "{}",
                file, name, dtype.get_ref<const std::string&>(), shape.dump(),
                nbytes ? fmt::format("{}", *nbytes) : std::string("more than 2^64"),
                info.data_begin, info.data_end, info.nbytes());
  return info;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  const std::string file = path.string();
  // O_NONBLOCK: open(2) of a FIFO blocks until a writer appears, so a FIFO in place of a shard
  // would hang here before fstat could refuse it. It changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    FSDPP_THROW(CheckpointError, "[state] cannot open '{}': {}", file, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    FSDPP_THROW(CheckpointError, "[state] '{}' is not a regular file; expected a safetensors file", file);
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    FSDPP_THROW(CheckpointError,
                "[state] '{}' is {} bytes, too short for the 8-byte header length; truncated?",
                file, file_size);
  }
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->fd.reset(fd);
  char length_bytes[8];
  if (!read_at(fd, length_bytes, 8, 0))
    FSDPP_THROW(CheckpointError, "[state] cannot read '{}': {}", file, std::strerror(errno));
  uint64_t header_len;
  std::memcpy(&header_len, length_bytes, 8);
  if (header_len > file_size - 8)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': header length {} exceeds the {} bytes after the length field; "
                "truncated, or not a safetensors file",
                file, header_len, file_size - 8);
  if (header_len > kMaxHeaderBytes)
    FSDPP_THROW(CheckpointError, "[state] '{}': header length {} exceeds the limit of {} bytes",
                file, header_len, kMaxHeaderBytes);
  std::string header_text(header_len, '\0');
  if (!read_at(fd, header_text.data(), header_len, 8))
    FSDPP_THROW(CheckpointError, "[state] cannot read the header of '{}': {}", file,
                std::strerror(errno));
  if (header_len < 2 || header_text[0] != '{')
    FSDPP_THROW(CheckpointError,
                "[state] '{}': the header does not start with '{{'; not a safetensors file", file);
  impl->data_start = 8 + header_len;
  impl->data_size = file_size - 8 - header_len;

  // nlohmann keeps the last of two equal keys silently; a duplicate tensor name or field is a
  // corrupt header, so the parser callback records the first one.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const auto on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty() &&
               !open_objects.back().insert(parsed.get<std::string>()).second &&
               duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(header_text.begin(), header_text.end(), on_event);
  } catch (const json::exception& ex) {
    FSDPP_THROW(CheckpointError, "[state] '{}': the header is not valid JSON: {}", file,
                escaped_bytes(ex.what()));
  }
  if (!duplicate.empty())
    FSDPP_THROW(CheckpointError, "[state] '{}': the header has the key '{}' twice", file,
                duplicate);
  if (!header.is_object())
    FSDPP_THROW(CheckpointError, "[state] '{}': the header is a JSON {}, expected an object",
                file, header.type_name());

  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object())
        FSDPP_THROW(CheckpointError, "[state] '{}': __metadata__ is a {}, expected an object",
                    file, value.type_name());
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string())
          FSDPP_THROW(CheckpointError,
                      "[state] '{}': __metadata__ '{}' is a {}, expected a string", file, mkey,
                      mvalue.type_name());
        impl->metadata.emplace(mkey, mvalue.get<std::string>());
      }
      continue;
    }
    impl->infos.emplace(key, parse_entry(path, key, value, impl->data_size));
  }

  // The tensors must tile the data area: sorted by offset, each begins where the last ended.
  std::vector<std::pair<const std::string*, const TensorInfo*>> order;
  for (const auto& [name, info] : impl->infos) order.emplace_back(&name, &info);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->data_begin, a.second->data_end) <
           std::pair(b.second->data_begin, b.second->data_end);
  });
  uint64_t cursor = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, info] : order) {
    if (info->data_begin < cursor)
      FSDPP_THROW(CheckpointError,
                  "[state] '{}': tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' which "
                  "ends at {}",
                  file, *name, info->data_begin, info->data_end, *previous, cursor);
    if (info->data_begin > cursor)
      FSDPP_THROW(CheckpointError,
                  "[state] '{}': bytes [{}, {}) of the data area belong to no tensor (before "
                  "tensor '{}'); expected the tensors to tile the data area",
                  file, cursor, info->data_begin, *name);
    cursor = info->data_end;
    previous = name;
    impl->names.push_back(*name);
  }
  if (cursor != impl->data_size)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': {} bytes of trailing data after the last tensor ends at {} (data "
                "area of {} bytes)",
                file, impl->data_size - cursor, cursor, impl->data_size);
  return SafetensorsFile(std::move(impl));
}

const fs::path& SafetensorsFile::path() const { return impl_->path; }
const std::vector<std::string>& SafetensorsFile::names() const { return impl_->names; }
bool SafetensorsFile::contains(const std::string& name) const {
  return impl_->infos.contains(name);
}
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}
const SafetensorsFile::TensorInfo& SafetensorsFile::info(const std::string& name) const {
  return impl_->find(name);
}

at::Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo& info = impl_->find(name);
  at::Tensor out = at::empty(info.shape, at::TensorOptions().dtype(info.dtype));
  impl_->read(name, static_cast<char*>(out.data_ptr()), info.data_begin, info.nbytes());
  return out;
}

at::Tensor SafetensorsFile::read_rows(const std::string& name, int64_t first, int64_t rows) const {
  const TensorInfo& info = impl_->find(name);
  const int64_t dim0 = info.shape.empty() ? 1 : info.shape[0];
  if (first < 0 || rows < 0 || first + rows > dim0)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': rows [{}, {}) of tensor '{}' are asked for, but it has {} rows",
                impl_->path.string(), first, first + rows, name, dim0);
  const uint64_t row_bytes = dim0 == 0 ? 0 : info.nbytes() / static_cast<uint64_t>(dim0);
  std::vector<int64_t> shape = info.shape.empty() ? std::vector<int64_t>{1} : info.shape;
  shape[0] = rows;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(info.dtype));
  impl_->read(name, static_cast<char*>(out.data_ptr()),
              info.data_begin + static_cast<uint64_t>(first) * row_bytes,
              static_cast<uint64_t>(rows) * row_bytes);
  return out;
}

at::Tensor SafetensorsFile::view(const std::string& name) const {
  const TensorInfo& info = impl_->find(name);
  const uint64_t offset = impl_->data_start + info.data_begin;
  const size_t item = c10::elementSize(info.dtype);
  if (offset % item != 0)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': tensor '{}' starts at file offset {}, not a multiple of its item "
                "size {}; it cannot be viewed in place, use get()",
                impl_->path.string(), name, offset, item);
  if (info.nbytes() == 0) return at::empty(info.shape, at::TensorOptions().dtype(info.dtype));
  // The tensor's pages only, private and writable: writes go to this view's copy-on-write
  // pages, never to the file.
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const size_t length = static_cast<size_t>(offset + info.nbytes() - start);
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, impl_->fd.get(),
                   static_cast<off_t>(start));
  if (p == MAP_FAILED)
    FSDPP_THROW(CheckpointError, "[state] cannot map tensor '{}' of '{}' ({} bytes): {}", name,
                impl_->path.string(), info.nbytes(), std::strerror(errno));
  char* data = static_cast<char*>(p) + (offset - start);
  return at::from_blob(
      data, info.shape, [p, length](void*) { ::munmap(p, length); },
      at::TensorOptions().dtype(info.dtype));
}

}  // namespace fsdpp::state
