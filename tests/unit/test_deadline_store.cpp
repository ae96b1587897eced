// DeadlineStore: every store call ends within the store's timeout, even over a store whose calls
// block forever (a TCPStore whose host is SIGSTOPped), and a store that stopped answering fails
// every later call at once instead of stacking up more blocked calls.
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../../src/dist/deadline_store.h"
#include "fsdpp/common/error.h"

namespace {

using fsdpp::dist::detail::DeadlineStore;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A HashStore whose calls block while `frozen`, as a stopped host's would.
class FreezableStore : public c10d::HashStore {
 public:
  void freeze() {
    std::lock_guard<std::mutex> lock(m_);
    frozen_ = true;
  }
  void thaw() {
    {
      std::lock_guard<std::mutex> lock(m_);
      frozen_ = false;
    }
    cv_.notify_all();
  }
  int64_t add(const std::string& key, int64_t value) override {
    block();
    return c10d::HashStore::add(key, value);
  }
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    block();
    c10d::HashStore::set(key, value);
  }
  bool check(const std::vector<std::string>& keys) override {
    block();
    return c10d::HashStore::check(keys);
  }

 private:
  void block() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !frozen_; });
  }
  std::mutex m_;
  std::condition_variable cv_;
  bool frozen_ = false;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(DeadlineStore, PassesCallsThrough) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  auto store = c10::make_intrusive<DeadlineStore>(inner, "rank 0 at test:1", milliseconds(2000));
  store->set("a", {'x'});
  EXPECT_EQ(inner->get("a"), std::vector<uint8_t>({'x'}));
  EXPECT_EQ(store->add("n", 3), 3);
  EXPECT_EQ(store->add("n", 2), 5);
  EXPECT_TRUE(store->check({"a"}));
  EXPECT_FALSE(store->check({"b"}));
  EXPECT_TRUE(store->deleteKey("a"));
  EXPECT_TRUE(store->unresponsive().empty());
  // A wait for a key another thread sets later is not a hang.
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    inner->set("late", {'1'});
  });
  store->wait({"late"});
  later.join();
  EXPECT_EQ(store->get("late"), std::vector<uint8_t>({'1'}));
}

TEST(DeadlineStore, BlockedCallEndsAtTheDeadlineAndLaterCallsFailAtOnce) {
  auto inner = c10::make_intrusive<FreezableStore>();
  auto store = c10::make_intrusive<DeadlineStore>(inner, "hosted by rank 0 at 10.0.0.1:29500",
                                                  milliseconds(500));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/default", store);
  inner->freeze();
  auto t0 = Clock::now();
  try {
    prefixed->add("traces", 0);
    FAIL() << "a call to a frozen store returned";
  } catch (const fsdpp::TimeoutError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[dist] the rendezvous store (hosted by rank 0 at 10.0.0.1:29500) did not "
                       "answer 'add fsdpp/default/traces' within 500 ms"),
              std::string::npos)
        << msg;
  }
  EXPECT_GE(seconds_since(t0), 0.45);
  EXPECT_LT(seconds_since(t0), 2.0);
  // The hang detector asks through the prefix store what is wrong.
  const std::string why = fsdpp::dist::detail::store_unresponsive(prefixed);
  EXPECT_NE(why.find("has not answered 'add fsdpp/default/traces'"), std::string::npos) << why;
  EXPECT_NE(why.find("hosted by rank 0"), std::string::npos) << why;

  t0 = Clock::now();
  EXPECT_THROW(store->set("x", {'1'}), fsdpp::TimeoutError);
  EXPECT_THROW(store->check({"x"}), fsdpp::TimeoutError);
  EXPECT_LT(seconds_since(t0), 0.2) << "calls after a missed deadline must not wait again";

  // Once the blocked call returns, the store is usable again.
  inner->thaw();
  for (int i = 0; i < 100 && !store->unresponsive().empty(); ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(store->unresponsive().empty());
  EXPECT_EQ(store->add("traces2", 1), 1);
}

TEST(DeadlineStore, CallQueuedBehindALongWaitIsNotDeclaredBlocked) {
  // The deadline counts from when a call starts, not from when it queued behind another.
  auto inner = c10::make_intrusive<c10d::HashStore>();
  auto store = c10::make_intrusive<DeadlineStore>(inner, "rank 0 at test:1", milliseconds(400));
  std::thread waiter([&] { store->wait({"k"}, milliseconds(600)); });
  std::this_thread::sleep_for(milliseconds(50));
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(450));
    inner->set("k", {'1'});
  });
  EXPECT_EQ(store->add("n", 1), 1);  // queued ~450 ms, longer than the 400 ms bound
  waiter.join();
  setter.join();
  EXPECT_TRUE(store->unresponsive().empty());
}

TEST(DeadlineStore, DestroyedWhileACallIsBlocked) {
  auto inner = c10::make_intrusive<FreezableStore>();
  {
    auto store = c10::make_intrusive<DeadlineStore>(inner, "rank 0 at test:1", milliseconds(100));
    inner->freeze();
    EXPECT_THROW(store->add("n", 1), fsdpp::TimeoutError);
  }  // must not join the blocked worker
  inner->thaw();
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(inner->add("n", 0), 1);  // the blocked call finished after all
}

}  // namespace
