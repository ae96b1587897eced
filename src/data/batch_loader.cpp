#include "fsdpp/data/batch_loader.h"

#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

// How often an idle worker looks at the stop flag (the destructor also wakes it at once).
constexpr auto kPoll = std::chrono::milliseconds(100);

}  // namespace

BatchLoader::BatchLoader(PlannedSampler& sampler, BatchLoaderOptions options)
    : sampler_(sampler), options_(options), state_(sampler.state()) {
  FSDPP_CHECK_AS(ConfigError, options_.batch_size >= 1,
                 "[data] BatchLoader batch_size={} is not positive; expected >= 1",
                 options_.batch_size);
  FSDPP_CHECK_AS(ConfigError, options_.num_workers >= 0,
                 "[data] BatchLoader num_workers={} is negative; expected >= 0 (0: batches made "
                 "on the caller's thread)",
                 options_.num_workers);
  FSDPP_CHECK_AS(ConfigError, options_.prefetch_factor >= 1,
                 "[data] BatchLoader prefetch_factor={} is not positive; expected >= 1",
                 options_.prefetch_factor);
  workers_.reserve(static_cast<size_t>(options_.num_workers));
  try {
    for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { work(); });
  } catch (...) {  // a thread that cannot start: stop those that did before the members go
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    throw;
  }
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

BatchLoader::Batch BatchLoader::load(std::vector<int64_t> starts) const {
  auto b = sampler_.load_batch(starts);
  if (options_.pin_memory) {
    b.inputs = b.inputs.pin_memory();
    b.targets = b.targets.pin_memory();
    if (b.positions.defined()) b.positions = b.positions.pin_memory();
  }
  return {b.inputs, b.targets, std::move(starts), b.positions};
}

void BatchLoader::work() {
  const int64_t ahead = static_cast<int64_t>(options_.num_workers) * options_.prefetch_factor;
  for (;;) {
    int64_t ticket = 0;
    Made made;
    std::vector<int64_t> starts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Planned but not yet returned batches stay within `ahead`: memory is bounded and the
      // workers wait while the trainer computes.
      while (!stop_ && planned_ - returned_ >= ahead) cv_.wait_for(lock, kPoll);
      if (stop_) return;
      ticket = planned_++;
      try {
        starts = sampler_.plan_batch(options_.batch_size);
      } catch (...) {
        made.error = std::current_exception();
      }
      made.after = sampler_.state();
    }
    if (!made.error) {
      try {
        made.batch = load(starts);
      } catch (...) {
        made.error = std::current_exception();
      }
    }
    const bool failed = static_cast<bool>(made.error);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(ticket, std::move(made));
    }
    cv_.notify_all();
    // The error reaches the trainer through next(), in its place in the order; the batches after
    // it would never be used.
    if (failed) return;
  }
}

std::pair<at::Tensor, at::Tensor> BatchLoader::next() {
  auto b = next_batch();
  return {b.inputs, b.targets};
}

BatchLoader::Batch BatchLoader::next_batch() {
  if (workers_.empty()) {
    auto batch = load(sampler_.plan_batch(options_.batch_size));
    std::lock_guard<std::mutex> lock(mu_);
    state_ = sampler_.state();
    ++returned_;
    return batch;
  }
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t ticket = returned_;
  if (!cv_.wait_for(lock, options_.timeout, [&] { return ready_.count(ticket) > 0; })) {
    FSDPP_THROW(Error,
                "[data] batch {} was not ready after {} ms from {} loader threads "
                "(training.dataloader_num_workers); the token files may be on a stalled disk",
                ticket, options_.timeout.count(), options_.num_workers);
  }
  auto it = ready_.find(ticket);
  Made made = std::move(it->second);
  ready_.erase(it);
  ++returned_;
  lock.unlock();
  cv_.notify_all();  // a worker waiting for room may plan the next batch
  if (made.error) std::rethrow_exception(made.error);
  lock.lock();
  state_ = made.after;
  return std::move(made.batch);
}

SamplerState BatchLoader::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

}  // namespace fsdpp::data
