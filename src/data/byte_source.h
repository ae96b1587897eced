#pragma once
// A data file's bytes as they are read, decompressed on the way for .gz (zlib) and .zst
// (libzstd), so that a compressed JSON Lines file streams like a plain one.

#include <cstddef>
#include <memory>

#include "fsdpp/data/data_files.h"

namespace fsdpp::data::detail {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `capacity` bytes into `out`; 0 only at the end of the (decompressed) data. Throws
  // ConfigError naming the file when it cannot be read or is not what its compression says.
  virtual size_t read(char* out, size_t capacity) = 0;
};

// Opens `file` by its compression. Throws ConfigError naming the file when it cannot be opened.
std::unique_ptr<ByteSource> open_byte_source(const DataFile& file);

}  // namespace fsdpp::data::detail
