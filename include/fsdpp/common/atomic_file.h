#pragma once
// Writing one file so that readers see the old file or the whole new one, never a part, even
// if the writer is killed at any instruction or the machine loses power after commit():
//
//   fsdpp::AtomicFile f("runs/a/trace.json", "trace");  // runs/a/trace.json.tmp-<pid>-<hex>
//   f.write(bytes);                                      // or pwrite() at any offset
//   f.commit();                                          // fsync, rename, fsync of runs/a
//
// The temporary name is unique among concurrent writers (threads, ranks, hosts on a shared
// file system), so two writers of the same file never mix their bytes: the last rename wins.
// Without commit() the destructor removes the temporary file. For a whole directory see
// fsdpp/state/atomic_dir.h, whose cleanup_stale_tmp() also recognises these temporary names.
//
// Errors throw fsdpp::Error; the message starts with the caller's component ("[trace] ...")
// and names the path and the system's reason.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp {

class AtomicFile {
 public:
  // Creates the temporary file (not its directory) beside `path`. `component` prefixes errors.
  explicit AtomicFile(std::filesystem::path path, std::string component = "io");
  // Without commit(): removes the temporary file. Never throws.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends at the current end of what write() has written.
  void write(const void* data, std::size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // At `offset`, leaving write()'s position alone (a header filled in at the end).
  void pwrite(const void* data, std::size_t n, std::uint64_t offset);

  // fsyncs the data, renames the temporary file over path() and fsyncs the directory, so the
  // new name survives a power cut. Once it returns, the file is path().
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& tmp_path() const { return tmp_path_; }
  // For writers that size or write the file themselves (ftruncate, pwrite of their own).
  int fd() const { return fd_.get(); }
  bool committed() const { return committed_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  std::string component_;
  UniqueFd fd_;
  std::uint64_t end_ = 0;  // where write() appends
  bool committed_ = false;
};

// `bytes` as the whole content of `path`, through an AtomicFile.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           std::string component = "io");

// The last steps of an atomic write for a writer that made its own temporary file `tmp` (open
// as `fd`, beside `path`): fsync and close fd, rename tmp over path, fsync path's directory.
void commit_file_atomically(UniqueFd fd, const std::filesystem::path& tmp,
                            const std::filesystem::path& path, std::string_view component = "io");

// fsync(2) of a file or a directory, naming the path in the error.
void fsync_path(const std::filesystem::path& path, std::string_view component = "io");

}  // namespace fsdpp
