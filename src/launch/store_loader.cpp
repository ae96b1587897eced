// Finds and loads libfsdpp_run_store.so (see store.h for why it is a module).

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "fsdpp/launch/launcher.h"
#include "store.h"

#ifndef FSDPP_RUN_STORE_RELPATH
#error "FSDPP_RUN_STORE_RELPATH (the module's path relative to fsdpp-run's folder) is not set"
#endif

namespace fsdpp::launch {
namespace {

// FSDPP_RUN_STORE_MODULE if set; else the module where the build and `cmake --install` put it
// relative to this executable (bin/../lib/fsdpp/).
std::filesystem::path module_path() {
  if (const char* explicit_path = std::getenv("FSDPP_RUN_STORE_MODULE");
      explicit_path != nullptr && *explicit_path != '\0') {
    return explicit_path;
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    throw LaunchError(fmt::format(
        "[fsdpp-run] cannot locate this executable to find the store module ({}); set "
        "FSDPP_RUN_STORE_MODULE to the path of libfsdpp_run_store.so",
        ec.message()));
  }
  return (exe.parent_path() / FSDPP_RUN_STORE_RELPATH).lexically_normal();
}

}  // namespace

std::unique_ptr<KeyValueStore> open_store(const StoreOptions& options) {
  const auto path = module_path();
  // Never closed: LibTorch does not support being unloaded. dlopen() of a loaded module only
  // bumps its count, so no handle needs keeping.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw LaunchError(fmt::format(
        "[fsdpp-run] --nnodes > 1 needs the rendezvous store module, which did not load: {} "
        "(build the fsdpp_run_store target, or set FSDPP_RUN_STORE_MODULE to its path)",
        ::dlerror()));
  }
  auto open = reinterpret_cast<OpenStoreFn>(::dlsym(handle, kOpenStoreSymbol));
  if (open == nullptr) {
    throw LaunchError(fmt::format("[fsdpp-run] {} has no symbol {}: not fsdpp's store module",
                                  path.string(), kOpenStoreSymbol));
  }
  std::string error;
  KeyValueStore* store = open(options, &error);
  if (store == nullptr) throw std::runtime_error(error);
  return std::unique_ptr<KeyValueStore>(store);
}

}  // namespace fsdpp::launch
