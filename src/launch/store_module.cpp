// libfsdpp_run_store.so: c10d's TCPStore behind fsdpp-run's KeyValueStore interface (store.h).
// Loaded with dlopen() by multi-node launchers only; the one file of the launcher that sees
// LibTorch.

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

#include "store.h"

namespace fsdpp::launch {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// c10d's messages carry a C++ backtrace; the launcher prints one sentence.
[[noreturn]] void rethrow_plain() {
  try {
    throw;
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
}

class TcpStore final : public KeyValueStore {
 public:
  explicit TcpStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, bytes(value));
    } catch (...) {
      rethrow_plain();
    }
  }
  std::string get(const std::string& key) override {
    try {
      return text(store_->get(key));
    } catch (...) {
      rethrow_plain();
    }
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    try {
      std::vector<std::string> out;
      for (const auto& v : store_->multiGet(keys)) out.push_back(text(v));
      return out;
    } catch (...) {
      rethrow_plain();
    }
  }
  int64_t add(const std::string& key, int64_t delta) override {
    try {
      return store_->add(key, delta);
    } catch (...) {
      rethrow_plain();
    }
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    try {
      return text(store_->compareSet(key, bytes(expected), bytes(desired)));
    } catch (...) {
      rethrow_plain();
    }
  }
  bool check(const std::vector<std::string>& keys) override {
    try {
      return store_->check(keys);
    } catch (...) {
      rethrow_plain();
    }
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace
}  // namespace fsdpp::launch

extern "C" __attribute__((visibility("default"))) fsdpp::launch::KeyValueStore*
fsdpp_launch_open_store(const fsdpp::launch::StoreOptions& options, std::string* error) {
  // c10d logs every connection retry and lost connection to stderr with a backtrace; the
  // launcher reports what matters in one line of its own. (A process-wide LibTorch setting, but
  // in the launcher nothing else of LibTorch runs.)
  FLAGS_caffe2_log_level = c10::GLOG_FATAL;
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(options.port);
    o.isServer = options.is_server;
    o.numWorkers = std::nullopt;
    o.waitWorkers = false;
    o.timeout = options.timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(options.host, o);
    return new fsdpp::launch::TcpStore(std::move(store));
  } catch (const c10::Error& e) {
    *error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    *error = e.what();
  }
  return nullptr;
}
