#include "fsdpp/dist/device.h"

#include <ATen/Context.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstdlib>

#include "fsdpp/common/error.h"

namespace fsdpp::dist {
namespace {

const c10::impl::DeviceGuardImplInterface& impl_of(c10::DeviceType type) {
  return *c10::impl::getDeviceGuardImpl(type);
}

}  // namespace

Stream Stream::current(c10::Device device) {
  if (device.is_cpu()) return {};
  return Stream(impl_of(device.type()).getStream(device));
}

Stream Stream::from_pool(c10::Device device, bool high_priority) {
  if (device.is_cpu()) return {};
  return Stream(impl_of(device.type()).getStreamFromGlobalPool(device, high_priority));
}

void Stream::wait(const Event& event) const {
  if (stream_ && event.event_) event.event_->block(*stream_);
}

void Stream::synchronize() const {
  if (stream_) stream_->synchronize();
}

Event Event::recorded_on(const Stream& stream) {
  Event e;
  e.record(stream);
  return e;
}

void Event::record(const Stream& stream) {
  if (!stream.get()) return;
  // A fresh c10::Event each time: copies made before keep the point they were given.
  event_ = std::make_shared<c10::Event>(stream.get()->device_type());
  event_->record(*stream.get());
}

bool Event::query() const { return !event_ || event_->query(); }

void Event::synchronize() const {
  if (event_) event_->synchronize();
}

StreamGuard::StreamGuard(const Stream& stream) {
  if (const auto& s = stream.get()) previous_ = impl_of(s->device_type()).exchangeStream(*s);
}

StreamGuard::~StreamGuard() {
  if (previous_) impl_of(previous_->device_type()).exchangeStream(*previous_);
}

int cuda_device_count() {
  return at::globalContext().hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0;
}

c10::Device choose_device(const std::optional<std::string>& requested, int rank, int local_rank) {
  std::string want;
  if (requested) {
    want = *requested;
  } else if (const char* v = std::getenv("FSDPP_DEVICE"); v && *v) {
    want = v;
  }
  const int visible = cuda_device_count();
  if (want.empty()) {
    if (visible == 0) return c10::Device(c10::kCPU);
    want = "cuda";
  }
  if (want == "cpu") return c10::Device(c10::kCPU);
  int index = local_rank;
  if (want != "cuda") {
    const std::string prefix = "cuda:";
    char* end = nullptr;
    const long v = want.rfind(prefix, 0) == 0 ? std::strtol(want.c_str() + prefix.size(), &end, 10) : -1;
    FSDPP_CHECK_AS(ConfigError, end && *end == '\0' && end != want.c_str() + prefix.size() && v >= 0,
                   "[dist] device '{}' is not a device; expected cpu, cuda (the rank's LOCAL_RANK-th "
                   "GPU) or cuda:N",
                   want);
    index = static_cast<int>(v);
  }
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string seen =
      fmt::format("this process sees {} CUDA device(s){}", visible,
                  mask ? fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", mask) : std::string());
  FSDPP_CHECK_AS(ConfigError, visible > 0,
                 "[dist] rank {} (LOCAL_RANK {}) was asked to compute on cuda:{} (FSDPP_DEVICE), but "
                 "{}: no NVIDIA driver, or the devices are hidden; train on the CPU "
                 "(training.use_cpu=true, FSDPP_DEVICE=cpu)",
                 rank, local_rank, index, seen);
  FSDPP_CHECK_AS(ConfigError, index < visible,
                 "[dist] rank {} (LOCAL_RANK {}) would compute on cuda:{}, but {}; start at most {} "
                 "rank(s) per node (fsdpp-run --nproc-per-node), or train on the CPU "
                 "(training.use_cpu=true, FSDPP_DEVICE=cpu)",
                 rank, local_rank, index, seen, visible);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

bool has_device_memory(c10::Device device) { return !device.is_cpu(); }

namespace {

// The device's caching allocator, initialised: CUDA's knows no device before the first allocation
// or lazyInitDevice ("Invalid device argument ... did you call init?"), which a memory check made
// before anything is on the device would otherwise meet (seen on the first H100 run).
c10::DeviceAllocator* allocator_of(c10::Device device) {
  at::globalContext().lazyInitDevice(device.type());
  return c10::getDeviceAllocator(device.type());
}

}  // namespace

DeviceMemory device_memory(c10::Device device) {
  DeviceMemory m;
  if (!has_device_memory(device)) return m;
  auto* alloc = allocator_of(device);
  const auto stats = alloc->getDeviceStats(device.index());
  const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  m.allocated = stats.allocated_bytes[all].current;
  m.peak_allocated = stats.allocated_bytes[all].peak;
  m.reserved = stats.reserved_bytes[all].current;
  m.peak_reserved = stats.reserved_bytes[all].peak;
  const auto [free, total] = alloc->getMemoryInfo(device.index());
  m.free = static_cast<int64_t>(free);
  m.total = static_cast<int64_t>(total);
  return m;
}

void reset_peak_memory(c10::Device device) {
  if (has_device_memory(device)) allocator_of(device)->resetPeakStats(device.index());
}

}  // namespace fsdpp::dist
