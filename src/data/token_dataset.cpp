#include "fsdpp/data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <ATen/ops/empty.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

constexpr char kMagic[8] = {'F', 'S', 'D', 'P', 'P', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;
constexpr size_t kEncodeChunkBytes = size_t{1} << 20;  // bounds the tokenizer's working memory

// On disk (host byte order), followed by the tokenizer name and then, at data_offset, the
// tokens.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;  // 2 (uint16) or 4 (uint32)
  uint64_t count;        // tokens
  uint64_t vocab_size;
  uint64_t source_size;
  int64_t source_mtime_ns;
  uint64_t source_hash;  // XXH3-64 of the text
  uint32_t name_bytes;
  uint32_t data_offset;  // a multiple of 64, so the tokens are aligned for any width
};
static_assert(sizeof(Header) == 64);

// A read-only mapping of a whole file; unmapped on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FSDPP_CHECK(fd >= 0, "[data] cannot open '{}': {}", path.string(), std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
      const int err = errno;
      ::close(fd);
      FSDPP_CHECK(p != MAP_FAILED, "[data] cannot map '{}' ({} bytes): {}", path.string(), size_,
                  std::strerror(err));
      data_ = static_cast<const char*>(p);
    } else {
      ::close(fd);
    }
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

struct SourceInfo {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t hash = 0;
};

Header make_header(const SourceInfo& src, const Tokenizer& tok, uint32_t token_bytes,
                   uint64_t count, uint32_t name_bytes) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.token_bytes = token_bytes;
  h.count = count;
  h.vocab_size = static_cast<uint64_t>(tok.vocab_size());
  h.source_size = src.size;
  h.source_mtime_ns = src.mtime_ns;
  h.source_hash = src.hash;
  h.name_bytes = name_bytes;
  h.data_offset = static_cast<uint32_t>((sizeof(Header) + name_bytes + 63) / 64 * 64);
  return h;
}

// The cached file's header when it describes this text, this tokenizer and a complete body.
bool cache_matches(const MappedFile& file, const Header& expected, const std::string& name) {
  if (file.size() < sizeof(Header)) return false;
  Header h;
  std::memcpy(&h, file.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.version != kVersion ||
      h.token_bytes != expected.token_bytes || h.vocab_size != expected.vocab_size ||
      h.source_size != expected.source_size || h.source_mtime_ns != expected.source_mtime_ns ||
      h.source_hash != expected.source_hash || h.name_bytes != name.size() ||
      h.data_offset != expected.data_offset) {
    return false;
  }
  if (std::string_view(file.data() + sizeof(Header), h.name_bytes) != name) return false;
  return file.size() == h.data_offset + h.count * h.token_bytes;
}

// Encodes the text chunk by chunk (cut after a newline) into `out`; returns the token count.
uint64_t encode_into(AtomicFile& out, std::string_view text, const Tokenizer& tok, Header header,
                     const std::string& name, const std::filesystem::path& src) {
  out.write(&header, sizeof(header));  // count is filled in at the end
  out.write(name.data(), name.size());
  const std::string pad(header.data_offset - sizeof(Header) - name.size(), '\0');
  out.write(pad.data(), pad.size());

  const int64_t vocab = tok.vocab_size();
  uint64_t count = 0;
  std::vector<uint16_t> u16;
  std::vector<uint32_t> u32;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = std::min(text.size(), pos + kEncodeChunkBytes);
    if (end < text.size()) {
      // Cut after the last newline in the chunk, or the first after it: never inside a line
      // (nor a multi-byte character).
      size_t nl = text.rfind('\n', end - 1);
      if (nl == std::string_view::npos || nl < pos) nl = text.find('\n', end);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    const auto ids = tok.encode(text.substr(pos, end - pos));
    for (int32_t id : ids) {
      FSDPP_CHECK(id >= 0 && id < vocab,
                  "[data] tokenizer '{}' produced id {} for '{}', outside its vocabulary of {}",
                  name, id, src.string(), vocab);
    }
    if (header.token_bytes == 2) {
      u16.assign(ids.begin(), ids.end());
      out.write(u16.data(), u16.size() * 2);
    } else {
      u32.assign(ids.begin(), ids.end());
      out.write(u32.data(), u32.size() * 4);
    }
    count += ids.size();
    pos = end;
  }
  header.count = count;
  out.pwrite(&header, sizeof(header), 0);
  return count;
}

}  // namespace

// The token file, read with pread(2) through a descriptor kept open. Not a mapping: a file
// truncated while training (another job rebuilding a shared cache, a full disk, a user) would
// make the next access to a mapped page beyond the new end a SIGBUS, which no code can turn
// into an explanation. pread returns fewer bytes instead, and the copy into a tensor that
// slice() makes anyway costs the same either way.
class TokenDataset::Mapping {
 public:
  ~Mapping() {
    if (fd >= 0) ::close(fd);
  }
  // Reads tokens [first, first + n) of the file into `out` (n * token_bytes bytes); throws,
  // naming the file, when it ends early.
  void read(int64_t first, int64_t n, void* out) const {
    const size_t want = static_cast<size_t>(n) * token_bytes;
    const off_t at = static_cast<off_t>(data_offset + static_cast<uint64_t>(first) * token_bytes);
    size_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd, static_cast<char*>(out) + got, want - got, at + static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const int err = r < 0 ? errno : 0;
        struct stat st {};
        const long long size = ::fstat(fd, &st) == 0 ? static_cast<long long>(st.st_size) : -1;
        FSDPP_THROW(Error,
                    "[data] token cache '{}' {} reading tokens [{}, {}) at byte {}: the file is now "
                    "{} bytes, its header says {} ({} tokens). It was truncated or overwritten "
                    "while this job read it (another job rebuilding a shared data.cache_dir, a "
                    "full disk?); delete it and run again to rebuild it",
                    path.string(), err ? fmt::format("failed ({})", std::strerror(err)) : std::string("ended"),
                    first, first + n, static_cast<unsigned long long>(at) + got, size,
                    data_offset + static_cast<uint64_t>(count) * token_bytes, count);
      }
      got += static_cast<size_t>(r);
    }
  }

  int fd = -1;
  uint64_t data_offset = 0;
  uint32_t token_bytes = 2;
  int64_t count = 0;
  int64_t vocab_size = 0;
  std::filesystem::path path;
  bool reused = false;
};

TokenDataset TokenDataset::open(const std::filesystem::path& text_path, const Tokenizer& tokenizer,
                                const TokenDatasetOptions& options) {
  std::error_code ec;
  FSDPP_CHECK_AS(ConfigError, std::filesystem::exists(text_path, ec),
                 "[data] text file '{}' does not exist", text_path.string());
  FSDPP_CHECK_AS(ConfigError, std::filesystem::is_regular_file(text_path, ec),
                 "[data] '{}' is not a regular file; expected a text file", text_path.string());
  struct stat st {};
  FSDPP_CHECK_AS(ConfigError, ::stat(text_path.c_str(), &st) == 0, "[data] cannot stat '{}': {}",
                 text_path.string(), std::strerror(errno));
  FSDPP_CHECK_AS(ConfigError, st.st_size > 0,
                 "[data] text file '{}' is empty; expected text to tokenize", text_path.string());
  MappedFile text(text_path);
  const std::string_view view(text.data(), text.size());
  if (auto nul = view.find('\0'); nul != std::string_view::npos) {
    FSDPP_THROW(ConfigError,
                "[data] '{}' is not a text file: it has a NUL byte at offset {}; expected text "
                "(UTF-8) to tokenize",
                text_path.string(), nul);
  }

  const int64_t vocab = tokenizer.vocab_size();
  FSDPP_CHECK_AS(ConfigError, vocab > 0 && vocab <= (int64_t{1} << 32),
                 "[data] tokenizer '{}' has vocab_size={}; expected 1 .. 2^32", tokenizer.name(),
                 vocab);
  const uint32_t token_bytes = vocab <= 65536 ? 2 : 4;
  const std::string name = tokenizer.name();
  const SourceInfo src{static_cast<uint64_t>(st.st_size),
                       int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
                       XXH3_64bits(text.data(), text.size())};
  const Header expected = make_header(src, tokenizer, token_bytes, 0,
                                      static_cast<uint32_t>(name.size()));

  const auto dir = options.cache_dir.empty()
                       ? std::filesystem::absolute(text_path).parent_path() / ".fsdpp-cache"
                       : options.cache_dir;
  const auto cache = dir / fmt::format("{}.{:016x}.tokens", text_path.filename().string(),
                                       XXH3_64bits(name.data(), name.size()));

  auto mapping = std::make_shared<Mapping>();
  mapping->path = cache;
  MappedFile file;  // the whole cache, to check its header and size; unmapped on return
  if (std::filesystem::is_regular_file(cache, ec)) {
    MappedFile existing(cache);
    if (cache_matches(existing, expected, name)) {
      file = std::move(existing);
      mapping->reused = true;
    }
  }
  if (!mapping->reused) {
    std::filesystem::create_directories(dir, ec);
    FSDPP_CHECK(!ec, "[data] cannot create cache directory '{}': {}", dir.string(), ec.message());
    // Ranks (or threads) encoding the same text at once each write a file of their own, and
    // the last rename wins with identical content.
    AtomicFile out(cache, "data");
    encode_into(out, view, tokenizer, expected, name, text_path);
    out.commit();
    file = MappedFile(cache);
    FSDPP_CHECK(cache_matches(file, expected, name),
                "[data] token cache '{}' does not match what was just written to it",
                cache.string());
  }

  Header h;
  std::memcpy(&h, file.data(), sizeof(h));
  mapping->fd = ::open(cache.c_str(), O_RDONLY | O_CLOEXEC);
  FSDPP_CHECK(mapping->fd >= 0, "[data] cannot open token cache '{}': {}", cache.string(),
              std::strerror(errno));
  // The descriptor must be the file just checked: same size as the header says (a file renamed
  // over it in between by another writer holds the same tokens, so its size is all that can
  // differ).
  struct stat cst {};
  FSDPP_CHECK(::fstat(mapping->fd, &cst) == 0 && static_cast<uint64_t>(cst.st_size) == file.size(),
              "[data] token cache '{}' changed size while it was opened ({} bytes, expected {}); "
              "is another job rebuilding it?",
              cache.string(), static_cast<long long>(cst.st_size), file.size());
  mapping->data_offset = h.data_offset;
  mapping->token_bytes = h.token_bytes;
  mapping->count = static_cast<int64_t>(h.count);
  mapping->vocab_size = static_cast<int64_t>(h.vocab_size);
  const int64_t count = mapping->count;
  return TokenDataset(std::move(mapping), 0, count);
}

int64_t TokenDataset::token(int64_t i) const {
  FSDPP_CHECK(i >= 0 && i < size(), "[data] token index {} is out of range [0, {})", i, size());
  if (mapping_->token_bytes == 2) {
    uint16_t v;
    mapping_->read(begin_ + i, 1, &v);
    return v;
  }
  uint32_t v;
  mapping_->read(begin_ + i, 1, &v);
  return v;
}

at::Tensor TokenDataset::slice(int64_t begin, int64_t end) const {
  FSDPP_CHECK(0 <= begin && begin <= end && end <= size(),
              "[data] token slice [{}, {}) is out of range [0, {})", begin, end, size());
  auto out = at::empty({end - begin}, at::TensorOptions().dtype(at::kLong));
  auto* dst = out.data_ptr<int64_t>();
  const int64_t n = end - begin;
  std::vector<char> narrow(static_cast<size_t>(n) * mapping_->token_bytes);
  mapping_->read(begin_ + begin, n, narrow.data());
  if (mapping_->token_bytes == 2) {
    const auto* t = reinterpret_cast<const uint16_t*>(narrow.data());
    for (int64_t i = 0; i < n; ++i) dst[i] = t[i];
  } else {
    const auto* t = reinterpret_cast<const uint32_t*>(narrow.data());
    for (int64_t i = 0; i < n; ++i) dst[i] = t[i];
  }
  return out;
}

TokenDataset TokenDataset::subrange(int64_t begin, int64_t end) const {
  FSDPP_CHECK(0 <= begin && begin <= end && end <= size(),
              "[data] token range [{}, {}) is out of range [0, {})", begin, end, size());
  return TokenDataset(mapping_, begin_ + begin, begin_ + end);
}

std::pair<TokenDataset, TokenDataset> TokenDataset::split(double val_fraction) const {
  FSDPP_CHECK_AS(ConfigError, val_fraction >= 0 && val_fraction < 1,
                 "[data] validation fraction {} is out of range; expected 0 <= fraction < 1",
                 val_fraction);
  const auto n_val = static_cast<int64_t>(std::llround(static_cast<double>(size()) * val_fraction));
  return {subrange(0, size() - n_val), subrange(size() - n_val, size())};
}

int64_t TokenDataset::vocab_size() const { return mapping_->vocab_size; }
const std::filesystem::path& TokenDataset::cache_path() const { return mapping_->path; }
bool TokenDataset::reused_cache() const { return mapping_->reused; }

}  // namespace fsdpp::data
