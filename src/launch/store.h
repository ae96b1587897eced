#pragma once
// The key-value store the launchers of a multi-node job meet at: c10d's TCPStore, hosted by node
// 0's launcher on --master-addr:--master-port, the same store (and protocol) the workers then use.
//
// c10d lives in libtorch_cpu, whose start-up alone costs ~0.4 s and ~100 MB: linking it would
// make every single-node launch pay that for a store it never uses. So the store is a small
// module (libfsdpp_run_store.so, store_module.cpp) that fsdpp-run loads with dlopen() only when
// --nnodes > 1, behind this interface, which has no LibTorch type in it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fsdpp::launch {

// Every operation throws std::runtime_error when the store's host is gone, unreachable, or does
// not answer within the timeout: a type whose identity the launcher and the module share through
// libstdc++ (a class of ours would not match across the dlopen() boundary).
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits up to the store's timeout for `key`.
  virtual std::string get(const std::string& key) = 0;
  // The values of keys that all exist (else it waits, as get() does).
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if it is missing or holds `expected`; returns the value it holds
  // afterwards (so `desired` means this call won).
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
};

struct StoreOptions {
  std::string host;
  int port = 0;
  bool is_server = false;  // host the store (binds every interface) and connect to it
  // Bounds every operation, and how long a client keeps trying to connect.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

// Loads the store module (on first use) and opens a store. Throws LaunchError when the module
// cannot be loaded and std::runtime_error when the store cannot be opened.
std::unique_ptr<KeyValueStore> open_store(const StoreOptions& options);

// The module's entry point, looked up with dlsym: returns nullptr and sets *error on failure.
using OpenStoreFn = KeyValueStore* (*)(const StoreOptions& options, std::string* error);
inline constexpr const char* kOpenStoreSymbol = "fsdpp_launch_open_store";

}  // namespace fsdpp::launch
