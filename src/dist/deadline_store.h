#pragma once
// A c10d::Store whose every call ends within a deadline, over one that may block forever.
//
// c10d's TCPStore client waits on its socket with no limit: when the process that hosts the
// store (rank 0, unless a launcher does) is stopped (SIGSTOP, a debugger, a swapped-out host) or
// hung, its TCP connections stay open and every `add`, `set` or `check` of every other rank
// blocks for good; the hang detector that reads the store hung with it. Each call here runs on
// the store's own worker thread while the caller waits at most the store's timeout. A call that
// misses its deadline throws TimeoutError naming the host; from then on the store counts as
// unresponsive and every call fails at once (the worker is still blocked in the old call),
// until that call returns. A call whose connection fails (reset, broken pipe: the host exited
// or was killed) throws CommError naming the host, and so does every later call, at once.
//
// The wrapped store is kept alive by the worker, which a blocked call may hold past the
// wrapper's destruction: the worker is then detached rather than joined.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace fsdpp::dist::detail {

class DeadlineStore : public c10d::Store {
 public:
  // `host` names who serves the store, for messages ("rank 0 at 10.0.0.1:29500").
  DeadlineStore(c10::intrusive_ptr<c10d::Store> inner, std::string host,
                std::chrono::milliseconds timeout);
  ~DeadlineStore() override;

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;
  void append(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<std::vector<uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::vector<uint8_t>>& values) override;
  bool hasExtendedApi() const override;

  // Empty while the store answers; else why it counts as unresponsive or gone (for error
  // messages of callers that swallow store errors, such as the hang detector).
  std::string unresponsive() const;
  // One cheap call bounded by `bound` (shorter than the timeout: for error paths that want to
  // know whether the store's host is alive before they explain a failure). Returns unresponsive().
  std::string probe(std::chrono::milliseconds bound);

  struct Worker;

 private:
  template <typename R, typename F>
  R call(const char* op, const std::string& key, std::chrono::milliseconds bound, F fn);

  c10::intrusive_ptr<c10d::Store> inner_;
  std::string host_;
  std::shared_ptr<Worker> worker_;
};

// What a DeadlineStore somewhere below `store` (through PrefixStores) says of its host; empty
// when it answers or when there is none.
std::string store_unresponsive(const c10::intrusive_ptr<c10d::Store>& store);
// The same after DeadlineStore::probe(bound) when the store has not failed already.
std::string probe_store(const c10::intrusive_ptr<c10d::Store>& store,
                        std::chrono::milliseconds bound);

}  // namespace fsdpp::dist::detail
