// SafetensorsFile: the header checked field by field before any offset is trusted, the file
// mapped once, tensors read as copies or as views into the mapping.
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

// The whole file, mapped private and writable: view() tensors may be written to (copy-on-write,
// the file never changes) instead of faulting on a read-only page.
class Mapping {
 public:
  Mapping(void* data, size_t size) : data_(static_cast<char*>(data)), size_(size) {}
  ~Mapping() { ::munmap(data_, size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_;
  size_t size_;
};

}  // namespace

struct SafetensorsFile::Impl {
  fs::path path;
  std::shared_ptr<Mapping> mapping;
  const char* data = nullptr;  // start of the data area
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
  void* p = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    FSDPP_THROW(CheckpointError, "[state] cannot map '{}' ({} bytes): {}", file, file_size,
                std::strerror(map_err));

  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->mapping = std::make_shared<Mapping>(p, file_size);
  const char* bytes = impl->mapping->data();

  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > file_size - 8)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': header length {} exceeds the {} bytes after the length field; "
                "truncated, or not a safetensors file",
                file, header_len, file_size - 8);
  if (header_len > kMaxHeaderBytes)
    FSDPP_THROW(CheckpointError, "[state] '{}': header length {} exceeds the limit of {} bytes",
                file, header_len, kMaxHeaderBytes);
  if (header_len < 2 || bytes[8] != '{')
    FSDPP_THROW(CheckpointError,
                "[state] '{}': the header does not start with '{{'; not a safetensors file", file);
  impl->data = bytes + 8 + header_len;
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
    header = json::parse(bytes + 8, bytes + 8 + header_len, on_event);
  } catch (const json::exception& ex) {
    FSDPP_THROW(CheckpointError, "[state] '{}': the header is not valid JSON: {}", file,
                ex.what());
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
  if (info.nbytes() > 0) std::memcpy(out.data_ptr(), impl_->data + info.data_begin, info.nbytes());
  return out;
}

at::Tensor SafetensorsFile::view(const std::string& name) const {
  const TensorInfo& info = impl_->find(name);
  // The mapping is writable (MAP_PRIVATE), so dropping const here is sound.
  char* ptr = const_cast<char*>(impl_->data) + info.data_begin;
  const size_t item = c10::elementSize(info.dtype);
  if (reinterpret_cast<uintptr_t>(ptr) % item != 0)
    FSDPP_THROW(CheckpointError,
                "[state] '{}': tensor '{}' starts at file offset {}, not a multiple of its item "
                "size {}; it cannot be viewed in place, use get()",
                impl_->path.string(), name, ptr - impl_->mapping->data(), item);
  std::shared_ptr<Mapping> keep = impl_->mapping;
  return at::from_blob(
      ptr, info.shape, [keep = std::move(keep)](void*) mutable { keep.reset(); },
      at::TensorOptions().dtype(info.dtype));
}

}  // namespace fsdpp::state
