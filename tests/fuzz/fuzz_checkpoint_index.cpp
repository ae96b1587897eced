// libFuzzer target: a checkpoint's index.json, read as fsdpp-ckpt inspect and consolidate read
// it (describe_checkpoint with checksum verification, read_full_model), over a fixed set of
// real data files: model.safetensors of a FULL checkpoint and shard-0/1 + buffers of the
// SHARDED one made from it. The seed corpus holds those two checkpoints' own index.json files
// (FSDPP_FUZZ_WRITE_SEEDS=DIR writes them again).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/consolidate.h"
#include "fuzz_common.h"

namespace fs = std::filesystem;

namespace {

// <tmp>/work holds every data file of both layouts; each input becomes work/index.json.
fs::path make_fixture() {
  char tmpl[] = "/tmp/fsdpp-fuzz-index-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) fsdpp::fuzz::finding("mkdtemp failed", tmpl);
  const fs::path root = tmpl;
  // Deterministic tensors (so the seeds' checksums stay right): a 2-D weight, a 1-D bias, a
  // 0-dim scalar, and a buffer.
  const auto w = at::arange(15, at::kFloat).reshape({5, 3}) / 7;
  const auto b = at::arange(3, at::kDouble) - 1;
  const auto s = at::full({}, 2.5, at::kFloat);
  const auto rope = at::arange(4, at::kFloat).reshape({2, 2});
  fsdpp::state::write_full_checkpoint(root / "full",
                                      {{"w", w}, {"b", b}, {"s", s}, {"rope", rope}}, {"rope"});
  fsdpp::state::reshard_checkpoint(root / "full", root / "sharded", 2);
  const fs::path work = root / "work";
  fs::create_directories(work);
  for (const char* layout : {"full", "sharded"}) {
    for (const auto& e : fs::directory_iterator(root / layout)) {
      if (e.path().filename() != "index.json") {
        fs::copy_file(e.path(), work / e.path().filename(), fs::copy_options::overwrite_existing);
      }
    }
  }
  if (const char* seeds = std::getenv("FSDPP_FUZZ_WRITE_SEEDS")) {
    for (const char* layout : {"full", "sharded"}) {
      fs::copy_file(root / layout / "index.json", fs::path(seeds) / (std::string(layout) + ".json"),
                    fs::copy_options::overwrite_existing);
    }
  }
  return work;
}

struct Fixture {
  fs::path work = make_fixture();
  ~Fixture() { fsdpp::state::remove_tree(work.parent_path()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  {
    std::ofstream out(fixture.work / "index.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) fsdpp::fuzz::finding("cannot write index.json", fixture.work.string());
  }
  fsdpp::fuzz::expect_clear_error([&] { (void)fsdpp::state::describe_checkpoint(fixture.work, true); });
  fsdpp::fuzz::expect_clear_error([&] { (void)fsdpp::state::read_full_model(fixture.work); });
  return 0;
}
