#pragma once
// Writing a whole directory (a checkpoint) so that readers see either the old one or the new
// one, whole, even if the writer is killed at any instruction.
//
//   fsdpp::state::AtomicDir dir("ckpt/step-100");     // creates ckpt/step-100.tmp-<pid>-<rand>
//   save_safetensors(dir.path() / "model.safetensors", ...);
//   dir.commit();                                      // fsync all, then swap in atomically
//
// commit() replaces an existing directory with one atomic rename(2) exchange (renameat2 with
// RENAME_EXCHANGE), so there is no moment at which `final_path` is missing; on a file system
// without it, it falls back to rename old away to "<final>.old-<pid>-<rand>", rename new in,
// delete old, and cleanup_stale_tmp() repairs a crash between those two renames.

#include <cstddef>
#include <filesystem>
#include <string>

namespace fsdpp::state {

class AtomicDir {
 public:
  // Creates the parent directories as needed and a fresh temporary directory beside
  // `final_path`. Throws CheckpointError when it cannot.
  explicit AtomicDir(std::filesystem::path final_path);
  // Without commit(): deletes the temporary directory and everything in it. Never throws.
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  // Where to write: the temporary directory before commit(), final_path after.
  const std::filesystem::path& path() const { return committed_ ? final_path_ : tmp_path_; }
  const std::filesystem::path& final_path() const { return final_path_; }
  bool committed() const { return committed_; }

  // fsyncs every file and directory under path(), moves it to final_path (replacing whatever
  // directory was there) and fsyncs the parent, so the new name survives a power cut.
  void commit();

 private:
  std::filesystem::path final_path_;
  std::filesystem::path tmp_path_;
  bool committed_ = false;
};

// fsync(2) of a file or a directory. Throws CheckpointError naming the path.
void fsync_path(const std::filesystem::path& path);

// Deletes a file or a directory tree without following symlinks. Not
// std::filesystem::remove_all: libtorch.so exports its own, ABI-incompatible copy of it, which
// crashes any binary that links the torch wheel. Throws CheckpointError naming the first path
// it cannot remove; a missing `path` is not an error. Returns the number of entries removed.
std::size_t remove_tree(const std::filesystem::path& path);

// "<name>.tmp-<pid>-<random hex>", unique among concurrent writers on this and other hosts.
std::filesystem::path unique_tmp_path(const std::filesystem::path& final_path);

// Repairs what killed writers left in `parent`: removes every "*.tmp-<pid>-<hex>" file or
// directory, and for every "X.old-<pid>-<hex>" removes it when X exists or renames it back to X
// when X does not (a fallback commit died between its two renames). Call it only while no
// writer is active in `parent` (for example on rank 0 before the first save): it cannot tell a
// live writer's temporary directory from a dead one's. Returns the number of entries removed or
// restored.
std::size_t cleanup_stale_tmp(const std::filesystem::path& parent);

}  // namespace fsdpp::state
