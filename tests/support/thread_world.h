#pragma once
// Runs a function on N ranks as threads of this process, over one HashStore: cheap
// multi-rank tests for the unit suite. Exceptions from any rank are rethrown on the caller.

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../../src/dist/flight_recorder.h"
#include "fsdpp/dist/world.h"

namespace fsdpp::test {

inline void run_ranks(int n, const std::function<void(dist::World&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  dist::detail::configure_flight_recorder();  // sets the environment: before any thread starts
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex m;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::DistEnv env;
        env.rank = r;
        env.world_size = n;
        env.local_rank = r;
        env.local_world_size = n;
        env.launched = true;
        env.timeout = timeout;
        dist::InitOptions o;
        o.backend = dist::BackendKind::GLOO;
        o.num_threads = 1;
        auto world = dist::init_world(env, store, o);
        fn(*world);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace fsdpp::test
