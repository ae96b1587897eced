#pragma once
// The compute device as a parameter, not a branch: what differs between the CPU and a GPU sits
// behind these few values, written once over c10's device-generic interfaces (c10::Stream,
// c10::Event, the device allocator), so that no file of fsdpp's includes CUDA to use a GPU.
//
// On the CPU work runs in issue order on the calling thread: a Stream is empty, and recording,
// waiting and guards are no-ops, so code written for streams runs on the CPU as it always did.
// On a GPU they are CUDA streams and events:
//
//   dist::Stream copy_in = dist::Stream::from_pool(device);   // a side stream, high priority
//   dist::Event ready;
//   {
//     dist::StreamGuard on(copy_in);  // work issued here goes to copy_in
//     copy_in.wait(dist::Event::recorded_on(dist::Stream::current(device)));
//     buffer.copy_(shard);
//     ready.record(copy_in);
//   }
//   dist::Stream::current(device).wait(ready);  // the compute stream waits; the CPU does not
//
// docs/gpus.md says how fsdpp uses them (FSDP's all-gather and reduce-scatter streams).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace fsdpp::dist {

// A queue of device work; empty on the CPU.
class Stream {
 public:
  Stream() = default;  // the CPU's
  explicit Stream(c10::Stream stream) : stream_(stream) {}

  // The stream work on `device` is issued to by this thread now (empty on the CPU).
  static Stream current(c10::Device device);
  // A stream of the device's pool (c10's round-robin pool: cheap, shared by the process);
  // empty on the CPU.
  static Stream from_pool(c10::Device device, bool high_priority = true);

  bool on_device() const { return stream_.has_value(); }
  // Work issued to this stream after this call waits for `event` (no CPU wait).
  void wait(const class Event& event) const;
  // Blocks the calling thread until everything issued to this stream has run.
  void synchronize() const;
  const std::optional<c10::Stream>& get() const { return stream_; }
  bool operator==(const Stream& other) const { return stream_ == other.stream_; }

 private:
  std::optional<c10::Stream> stream_;
};

// A point in a stream's work. Copies share one event; recording again moves it.
class Event {
 public:
  Event() = default;
  // An event recorded on `stream` now (an empty one on the CPU).
  static Event recorded_on(const Stream& stream);

  void record(const Stream& stream);
  // True when nothing was recorded or what was recorded has run.
  bool query() const;
  // Blocks the calling thread until what was recorded has run.
  void synchronize() const;
  bool recorded() const { return event_ != nullptr; }

 private:
  friend class Stream;
  std::shared_ptr<c10::Event> event_;
};

// Sets the current stream of the stream's device for this thread, and restores it on exit;
// does nothing for an empty (CPU) stream.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  std::optional<c10::Stream> previous_;
};

// How many CUDA devices this process sees (0 on a machine without GPUs or a build without
// CUDA, through ATen's hooks: no CUDA header needed).
int cuda_device_count();

// The device a rank computes on. `requested`: "cpu", "cuda" (the rank's LOCAL_RANK-th GPU) or
// "cuda:N"; empty: FSDPP_DEVICE if set, else the LOCAL_RANK-th GPU when CUDA devices are
// visible, else the CPU. A GPU that does not exist is a ConfigError naming the rank, its
// LOCAL_RANK, the devices visible and what to do.
c10::Device choose_device(const std::optional<std::string>& requested, int rank, int local_rank);

// The caching allocator's statistics on a GPU, and the device's free and total memory
// (cudaMemGetInfo); all zero on the CPU, where the process's RSS is what counts.
struct DeviceMemory {
  int64_t allocated = 0;       // bytes in tensors now
  int64_t reserved = 0;        // bytes the caching allocator holds from the device
  int64_t peak_allocated = 0;  // since the last reset_peak_memory
  int64_t peak_reserved = 0;
  int64_t free = 0;   // the device's free memory (all processes), cudaMemGetInfo
  int64_t total = 0;  // the device's memory
};
bool has_device_memory(c10::Device device);  // false on the CPU
DeviceMemory device_memory(c10::Device device);
void reset_peak_memory(c10::Device device);

}  // namespace fsdpp::dist
