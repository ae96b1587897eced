// Document shards: written once, read by document. See include/fsdpp/data/document_store.h.
#include "fsdpp/data/document_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "fsdpp/common/error.h"
#include "fsdpp/common/unique_fd.h"

namespace fs = std::filesystem;

namespace fsdpp::data {
namespace {

constexpr char kMagic[8] = {'F', 'S', 'D', 'P', 'P', 'D', 'O', 'C'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;  // 2 or 4
  uint64_t documents;
  uint64_t tokens;
  uint32_t has_mask;
  uint32_t reserved[7];
};
static_assert(sizeof(Header) == 64);

uint64_t mask_bytes(uint64_t tokens) { return (tokens + 7) / 8; }

uint64_t file_size_of(uint64_t documents, uint64_t tokens, uint32_t token_bytes, bool mask) {
  return sizeof(Header) + (documents + 1) * sizeof(int64_t) + tokens * token_bytes +
         (mask ? mask_bytes(tokens) : 0);
}

// Reads exactly n bytes at `at`; throws naming the file when it ends early.
void pread_exact(int fd, void* out, size_t n, uint64_t at, const fs::path& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(out) + got, n - got,
                              static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      struct stat st {};
      const long long size = ::fstat(fd, &st) == 0 ? static_cast<long long>(st.st_size) : -1;
      FSDPP_THROW(Error,
                  "[data] document shard '{}' {} reading {} bytes at byte {}: the file is now {} "
                  "bytes. It was truncated or replaced while this job read it; prepare the data "
                  "again (fsdpp-data prepare, or delete the cache to let fsdpp-train rebuild it)",
                  path.string(), r < 0 ? fmt::format("failed ({})", std::strerror(errno)) : "ended",
                  n, at + got, size);
    }
    got += static_cast<size_t>(r);
  }
}

}  // namespace

DocumentShardWriter::DocumentShardWriter(fs::path path, int64_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size) {
  FSDPP_CHECK_AS(ConfigError, vocab_size >= 1 && vocab_size <= (int64_t{1} << 32),
                 "[data] a vocabulary of {} tokens cannot be stored; expected 1 .. 2^32",
                 vocab_size);
  token_bytes_ = vocab_size <= 65536 ? 2 : 4;
}

void DocumentShardWriter::add(std::span<const int32_t> ids, std::span<const uint8_t> mask) {
  FSDPP_CHECK(mask.empty() || mask.size() == ids.size(),
              "[data] a document of {} tokens came with a loss mask of {} values", ids.size(),
              mask.size());
  const uint64_t first = static_cast<uint64_t>(offsets_.back());
  mask_bits_.resize(mask_bytes(first + ids.size()), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    FSDPP_CHECK(ids[i] >= 0 && ids[i] < vocab_size_,
                "[data] token id {} is outside the vocabulary of {}", ids[i], vocab_size_);
    ids_.push_back(static_cast<uint32_t>(ids[i]));
    const bool counts = mask.empty() || mask[i] != 0;
    any_masked_ = any_masked_ || !counts;
    if (counts) mask_bits_[(first + i) / 8] |= static_cast<uint8_t>(1u << ((first + i) % 8));
  }
  offsets_.push_back(static_cast<int64_t>(first + ids.size()));
}

ShardInfo DocumentShardWriter::commit() {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.token_bytes = token_bytes_;
  h.documents = static_cast<uint64_t>(documents());
  h.tokens = static_cast<uint64_t>(tokens());
  h.has_mask = any_masked_ ? 1 : 0;
  AtomicFile out(path_, "data");
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto put = [&](const void* p, size_t n) {
    out.write(p, n);
    XXH3_64bits_update(state, p, n);
  };
  put(&h, sizeof(h));
  put(offsets_.data(), offsets_.size() * sizeof(int64_t));
  if (token_bytes_ == 2) {
    std::vector<uint16_t> narrow(ids_.begin(), ids_.end());
    put(narrow.data(), narrow.size() * 2);
  } else {
    put(ids_.data(), ids_.size() * 4);
  }
  int64_t loss_tokens = tokens();
  if (any_masked_) {
    put(mask_bits_.data(), mask_bits_.size());
    loss_tokens = 0;
    for (uint8_t b : mask_bits_) loss_tokens += std::popcount(b);
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  out.commit();
  return ShardInfo{path_.filename().string(), documents(), tokens(), loss_tokens,
                   file_size_of(h.documents, h.tokens, h.token_bytes, any_masked_), hash};
}

uint64_t file_xxh3(const fs::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  FSDPP_CHECK(fd.get() >= 0, "[data] cannot open '{}': {}", path.string(), std::strerror(errno));
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buf(size_t{1} << 20);
  for (;;) {
    const ssize_t r = ::read(fd.get(), buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      XXH3_freeState(state);
      FSDPP_THROW(Error, "[data] cannot read '{}': {}", path.string(), std::strerror(errno));
    }
    if (r == 0) break;
    XXH3_64bits_update(state, buf.data(), static_cast<size_t>(r));
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

// One open shard: its offsets in memory, tokens and mask read on demand.
class DocumentStore::Shard {
 public:
  Shard(const fs::path& path, const ShardInfo& info) : path_(path) {
    fd_ = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    FSDPP_CHECK_AS(ConfigError, fd_.get() >= 0,
                   "[data] cannot open document shard '{}': {}; prepare the data again",
                   path.string(), std::strerror(errno));
    Header h{};
    struct stat st {};
    const bool sized = ::fstat(fd_.get(), &st) == 0 && static_cast<uint64_t>(st.st_size) >= sizeof(h);
    if (sized) pread_exact(fd_.get(), &h, sizeof(h), 0, path_);
    const bool ok = sized && std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 &&
                    h.version == kVersion && (h.token_bytes == 2 || h.token_bytes == 4) &&
                    h.documents == static_cast<uint64_t>(info.documents) &&
                    h.tokens == static_cast<uint64_t>(info.tokens) &&
                    static_cast<uint64_t>(st.st_size) == info.bytes &&
                    info.bytes == file_size_of(h.documents, h.tokens, h.token_bytes, h.has_mask);
    FSDPP_CHECK_AS(ConfigError, ok,
                   "[data] document shard '{}' does not match its manifest (expected {} "
                   "documents, {} tokens, {} bytes; the file has {} bytes{}); it was changed "
                   "after it was prepared: prepare the data again",
                   path.string(), info.documents, info.tokens, info.bytes,
                   sized ? static_cast<long long>(st.st_size) : -1LL,
                   sized ? fmt::format(", {} documents and {} tokens in its header", h.documents, h.tokens)
                         : std::string());
    token_bytes_ = h.token_bytes;
    has_mask_ = h.has_mask != 0;
    tokens_at_ = sizeof(Header) + (h.documents + 1) * sizeof(int64_t);
    mask_at_ = tokens_at_ + h.tokens * h.token_bytes;
    offsets_.resize(h.documents + 1);
    pread_exact(fd_.get(), offsets_.data(), offsets_.size() * sizeof(int64_t), sizeof(Header), path_);
    FSDPP_CHECK_AS(ConfigError,
                   offsets_.front() == 0 && offsets_.back() == static_cast<int64_t>(h.tokens) &&
                       std::is_sorted(offsets_.begin(), offsets_.end()),
                   "[data] document shard '{}' has inconsistent document offsets; prepare the "
                   "data again",
                   path.string());
  }

  int64_t documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t length(int64_t d) const { return offsets_[d + 1] - offsets_[d]; }

  void read(int64_t d, int64_t begin, int64_t end, int64_t* tokens, uint8_t* mask) const {
    const int64_t first = offsets_[d] + begin, n = end - begin;
    if (n <= 0) return;
    std::vector<char> raw(static_cast<size_t>(n) * token_bytes_);
    pread_exact(fd_.get(), raw.data(), raw.size(), tokens_at_ + static_cast<uint64_t>(first) * token_bytes_,
                path_);
    if (token_bytes_ == 2) {
      const auto* t = reinterpret_cast<const uint16_t*>(raw.data());
      for (int64_t i = 0; i < n; ++i) tokens[i] = t[i];
    } else {
      const auto* t = reinterpret_cast<const uint32_t*>(raw.data());
      for (int64_t i = 0; i < n; ++i) tokens[i] = t[i];
    }
    if (mask == nullptr) return;
    if (!has_mask_) {
      std::fill(mask, mask + n, uint8_t{1});
      return;
    }
    const uint64_t b0 = static_cast<uint64_t>(first) / 8, b1 = static_cast<uint64_t>(first + n + 7) / 8;
    std::vector<uint8_t> bits(b1 - b0);
    pread_exact(fd_.get(), bits.data(), bits.size(), mask_at_ + b0, path_);
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t t = static_cast<uint64_t>(first + i);
      mask[i] = (bits[t / 8 - b0] >> (t % 8)) & 1u;
    }
  }

 private:
  fs::path path_;
  UniqueFd fd_;
  uint32_t token_bytes_ = 2;
  bool has_mask_ = false;
  uint64_t tokens_at_ = 0, mask_at_ = 0;
  std::vector<int64_t> offsets_;
};

DocumentStore DocumentStore::open(const fs::path& dir, const std::vector<ShardInfo>& shards) {
  DocumentStore store;
  for (const auto& info : shards) {
    auto shard = std::make_shared<const Shard>(dir / info.file, info);
    store.first_doc_.push_back(store.first_doc_.back() + shard->documents());
    store.total_tokens_ += info.tokens;
    store.shards_.push_back(std::move(shard));
  }
  return store;
}

std::pair<const DocumentStore::Shard*, int64_t> DocumentStore::locate(int64_t doc) const {
  FSDPP_CHECK(doc >= 0 && doc < num_documents(), "[data] document {} is out of range [0, {})",
              doc, num_documents());
  // The last shard whose first document is <= doc (empty shards are skipped by upper_bound).
  const auto it = std::upper_bound(first_doc_.begin(), first_doc_.end(), doc);
  const auto i = static_cast<size_t>(it - first_doc_.begin()) - 1;
  return {shards_[i].get(), doc - first_doc_[i]};
}

int64_t DocumentStore::length(int64_t doc) const {
  const auto [shard, d] = locate(doc);
  return shard->length(d);
}

std::vector<int64_t> DocumentStore::lengths() const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_documents()));
  for (const auto& s : shards_) {
    for (int64_t d = 0; d < s->documents(); ++d) out.push_back(s->length(d));
  }
  return out;
}

void DocumentStore::read(int64_t doc, int64_t begin, int64_t end, int64_t* tokens,
                         uint8_t* mask) const {
  const auto [shard, d] = locate(doc);
  FSDPP_CHECK(0 <= begin && begin <= end && end <= shard->length(d),
              "[data] tokens [{}, {}) of document {} are out of range [0, {})", begin, end, doc,
              shard->length(d));
  shard->read(d, begin, end, tokens, mask);
}

}  // namespace fsdpp::data
