#include "fsdpp/dist/string_collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace fsdpp::dist {
namespace {

at::Device device_of(const ProcessGroup& g) {
  return g.backend_kind() == BackendKind::NCCL ? at::Device(at::kCUDA) : at::Device(at::kCPU);
}

}  // namespace

std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& s,
                                            const CollectiveTag& tag) {
  if (group.size() == 1) return {s};
  const auto dev = device_of(group);
  auto len = at::full({1}, static_cast<int64_t>(s.size()), at::TensorOptions(at::kLong)).to(dev);
  auto lens = at::empty({group.size()}, len.options());
  group.all_gather_into_tensor(lens, len, tag);
  lens = lens.cpu();
  const int64_t max_len = std::max<int64_t>(1, lens.max().item<int64_t>());
  auto bytes = at::zeros({max_len}, at::TensorOptions(at::kByte));
  if (!s.empty()) std::memcpy(bytes.data_ptr(), s.data(), s.size());
  bytes = bytes.to(dev);
  auto all = at::empty({group.size() * max_len}, bytes.options());
  group.all_gather_into_tensor(all, bytes, tag);
  all = all.cpu();
  std::vector<std::string> out;
  const auto* lp = lens.data_ptr<int64_t>();
  for (int q = 0; q < group.size(); ++q) {
    out.emplace_back(static_cast<const char*>(all.data_ptr()) + q * max_len,
                     static_cast<size_t>(lp[q]));
  }
  return out;
}

void broadcast_string(ProcessGroup& group, std::string& s, int root, const CollectiveTag& tag) {
  if (group.size() == 1) return;
  const auto dev = device_of(group);
  auto len = at::full({1}, static_cast<int64_t>(s.size()), at::TensorOptions(at::kLong)).to(dev);
  group.broadcast(len, root, tag);
  const int64_t n = len.cpu().item<int64_t>();
  auto bytes = at::zeros({std::max<int64_t>(n, 1)}, at::TensorOptions(at::kByte));
  if (group.rank() == root && n > 0) std::memcpy(bytes.data_ptr(), s.data(), n);
  bytes = bytes.to(dev);
  group.broadcast(bytes, root, tag);
  bytes = bytes.cpu();
  s.assign(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(n));
}

}  // namespace fsdpp::dist
