#include "byte_source.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/common/unique_fd.h"

namespace fsdpp::data::detail {
namespace {

constexpr size_t kInputChunk = size_t{1} << 20;

class FileBytes : public ByteSource {
 public:
  explicit FileBytes(const DataFile& file) : path_(file.path.string()) {
    fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    FSDPP_CHECK_AS(ConfigError, fd_, "[data] cannot open '{}': {}", path_, std::strerror(errno));
  }
  size_t read(char* out, size_t capacity) override {
    for (;;) {
      const ssize_t n = ::read(fd_.get(), out, capacity);
      if (n >= 0) return static_cast<size_t>(n);
      FSDPP_CHECK_AS(ConfigError, errno == EINTR, "[data] cannot read '{}': {}", path_, std::strerror(errno));
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
};

// gzip members, one after another as `cat a.gz b.gz` makes them (gzip -d reads them so too).
class GzipBytes : public ByteSource {
 public:
  explicit GzipBytes(const DataFile& file) : file_(file), in_(kInputChunk) {
    // 16 + MAX_WBITS: a gzip header only, so that a file that is not gzip is an error rather than
    // zlib's transparent pass-through.
    FSDPP_CHECK(inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK, "[data] zlib cannot start inflating '{}'",
                file_.path());
  }
  ~GzipBytes() override { inflateEnd(&z_); }

  size_t read(char* out, size_t capacity) override {
    const uInt cap = static_cast<uInt>(std::min<size_t>(capacity, size_t{1} << 30));
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = cap;
    while (z_.avail_out == cap) {
      // A full output buffer may leave output pending inside zlib: inflate again before reading.
      if (z_.avail_in == 0 && !pending_) {
        const size_t n = file_.read(in_.data(), in_.size());
        if (n == 0) {
          FSDPP_CHECK_AS(ConfigError, !in_member_, "[data] '{}' is truncated: its gzip data ends "
                         "in the middle of a member", file_.path());
          return 0;
        }
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        z_.avail_in = static_cast<uInt>(n);
      }
      in_member_ = true;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      pending_ = z_.avail_out == 0;
      if (rc == Z_STREAM_END) {
        in_member_ = pending_ = false;
        inflateReset(&z_);
        continue;
      }
      FSDPP_CHECK_AS(ConfigError, rc == Z_OK || rc == Z_BUF_ERROR,
                     "[data] '{}' is not a valid gzip file (its name ends in .gz): zlib says {}",
                     file_.path(), z_.msg ? z_.msg : zError(rc));
    }
    return cap - z_.avail_out;
  }

 private:
  FileBytes file_;
  std::vector<char> in_;
  z_stream z_{};
  bool pending_ = false;
  bool in_member_ = false;
};

// zstd frames, one after another (zstd -d reads concatenated frames so too).
class ZstdBytes : public ByteSource {
 public:
  explicit ZstdBytes(const DataFile& file) : file_(file), in_(kInputChunk), dctx_(ZSTD_createDCtx()) {
    FSDPP_CHECK(dctx_ != nullptr, "[data] libzstd cannot make a decompression context for '{}'",
                file_.path());
  }
  ~ZstdBytes() override { ZSTD_freeDCtx(dctx_); }

  size_t read(char* out, size_t capacity) override {
    ZSTD_outBuffer output{out, capacity, 0};
    while (output.pos == 0) {
      // A full output buffer may leave output pending inside libzstd: decompress again first.
      if (input_.pos == input_.size && !pending_) {
        const size_t n = file_.read(in_.data(), in_.size());
        if (n == 0) {
          // 0 from the last call: the frame ended; anything else is data that never came.
          FSDPP_CHECK_AS(ConfigError, last_ == 0, "[data] '{}' is truncated: its zstd frame "
                         "ends early", file_.path());
          return 0;
        }
        input_ = {in_.data(), n, 0};
      }
      last_ = ZSTD_decompressStream(dctx_, &output, &input_);
      FSDPP_CHECK_AS(ConfigError, !ZSTD_isError(last_),
                     "[data] '{}' is not a valid zstd file (its name ends in .zst): libzstd says {}",
                     file_.path(), ZSTD_getErrorName(last_));
      pending_ = output.pos == output.size;
    }
    return output.pos;
  }

 private:
  FileBytes file_;
  std::vector<char> in_;
  ZSTD_DCtx* dctx_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  size_t last_ = 0;
  bool pending_ = false;
};

}  // namespace

std::unique_ptr<ByteSource> open_byte_source(const DataFile& file) {
  switch (file.compression) {
    case Compression::GZIP: return std::make_unique<GzipBytes>(file);
    case Compression::ZSTD: return std::make_unique<ZstdBytes>(file);
    case Compression::NONE: break;
  }
  return std::make_unique<FileBytes>(file);
}

}  // namespace fsdpp::data::detail
