#include "device_order.h"

#include <ATen/ATen.h>

#include "nccl_backend.h"

namespace fsdpp::dist::detail {

c10::Device device_of(const Operands& operands) {
  for (const auto* list : {&operands.written, &operands.read}) {
    for (const auto& t : *list) {
      if (t.defined()) return t.device();
    }
  }
  return c10::Device(c10::kCPU);
}

void run_staged(const Operands& operands, c10::Device backend_device,
                const std::function<void(const Operands&)>& body) {
  bool all_there = true;
  for (const auto* list : {&operands.written, &operands.read}) {
    for (const auto& t : *list) all_there = all_there && (!t.defined() || t.device() == backend_device);
  }
  if (all_there) {
    body(operands);
    return;
  }
  // One copy per tensor, also when it is both read and written (an in-place all-reduce).
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (caller's, staged)
  auto staged = [&](const at::Tensor& t, bool read) {
    if (!t.defined() || t.device() == backend_device) return t;
    for (const auto& [orig, copy] : copies) {
      if (orig.is_same(t)) return copy;
    }
    auto copy = at::empty_like(t, t.options().device(backend_device).pinned_memory(false),
                               at::MemoryFormat::Contiguous);
    if (read) copy.copy_(t);
    copies.emplace_back(t, copy);
    return copy;
  };
  Operands on_backend;
  for (const auto& t : operands.read) on_backend.read.push_back(staged(t, /*read=*/true));
  for (const auto& t : operands.written) on_backend.written.push_back(staged(t, /*read=*/false));
  body(on_backend);
  for (size_t i = 0; i < operands.written.size(); ++i) {
    const auto& t = operands.written[i];
    if (t.defined() && !t.is_same(on_backend.written[i])) t.copy_(on_backend.written[i]);
  }
}

PlacedCollective place_collective(Operands operands, c10::Device backend_device, const Stream& comm,
                                  std::function<void(const Operands&)> body, int64_t delay_cycles) {
  PlacedCollective p;
  p.backend_device = backend_device;
  p.body = std::move(body);
  p.delay_cycles = delay_cycles;
  const c10::Device device = device_of(operands);
  if (!device.is_cpu()) {
    p.order = std::make_shared<DeviceOrder>();
    p.order->device = device;
    p.order->comm = comm;
    p.order->issued = Event::recorded_on(Stream::current(device));
    for (const auto* list : {&operands.read, &operands.written}) {
      p.order->keep_alive.insert(p.order->keep_alive.end(), list->begin(), list->end());
    }
  }
  p.operands = std::move(operands);
  return p;
}

void PlacedCollective::operator()() const {
  if (!order) {
    run_staged(operands, backend_device, body);  // CPU tensors: as they are on Gloo
    return;
  }
  StreamGuard on(order->comm);
  order->comm.wait(order->issued);
  if (delay_cycles > 0) delay_current_cuda_stream(delay_cycles);
  run_staged(operands, backend_device, body);
  order->done.record(order->comm);
}

}  // namespace fsdpp::dist::detail
