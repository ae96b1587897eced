// libFuzzer target: bytes -> SafetensorsFile::open (the header parser and its checks), then
// every tensor read back (get, view, checksum) from what the header promised.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fsdpp/state/safetensors.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One in-memory file, rewritten for every input and opened by path as a checkpoint would be.
  static const int fd = ::memfd_create("fuzz.safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0 ||
      (size > 0 && ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) {
    fsdpp::fuzz::finding("cannot write the input file", path);
  }
  fsdpp::fuzz::expect_clear_error([&] {
    const auto f = fsdpp::state::SafetensorsFile::open(path);
    (void)f.metadata();
    for (const auto& name : f.names()) {
      const auto& info = f.info(name);
      const at::Tensor t = f.get(name);
      if (static_cast<uint64_t>(t.nbytes()) != info.nbytes()) {
        fsdpp::fuzz::finding("get() returned another size than the header says", name);
      }
      (void)fsdpp::state::checksum(t);
      try {
        (void)f.view(name).sum();
      } catch (const fsdpp::CheckpointError&) {  // unaligned: view() refuses, get() works
      }
    }
  });
  return 0;
}
