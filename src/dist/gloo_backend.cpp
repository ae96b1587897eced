#include "gloo_backend.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>
#include <utility>
#include <vector>

#include "fsdpp/common/host_address.h"

namespace fsdpp::dist::detail {
namespace {

std::shared_ptr<::gloo::transport::Device> make_device(const ProcessGroup::Options& o) {
  using c10d::ProcessGroupGloo;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (!o.gloo_hostname.empty()) return ProcessGroupGloo::createDeviceForHostname(o.gloo_hostname);
  if (is_loopback(o.master_addr)) return ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return ProcessGroupGloo::createDefaultDevice();
}

class GlooBackend final : public Backend {
 public:
  GlooBackend(c10::intrusive_ptr<c10d::Backend> c10d, int rank, int size,
              std::chrono::milliseconds timeout)
      : Backend(std::move(c10d), rank, size, timeout) {}

  at::Device device() const override { return at::Device(at::kCPU); }

  // Ring reduce-scatter: at step s rank r sends its running sum of chunk (r-s-1) to the right
  // and adds its own part of chunk (r-s-2) to what arrives from the left; after size-1 steps it
  // holds the full sum of chunk r. Each rank sends (size-1) chunks: (size-1)/size of the input,
  // half of what c10d's Gloo reduce_scatter_tensor (an all-reduce of the whole input) moves, and
  // it needs two chunk-sized buffers instead of a full-size clone.
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                      ReduceOp op) const override {
    const int n = size();
    const int r = rank();
    const int64_t c = output.numel();
    auto flat = input.view({-1});
    auto out = output.view({-1});
    auto chunk = [&](int k) { return flat.narrow(0, static_cast<int64_t>(k) * c, c); };
    auto combine = [&](at::Tensor dst, const at::Tensor& a, const at::Tensor& b) {
      if (op == ReduceOp::MAX) {
        at::maximum_out(dst, a, b);
      } else {
        at::add_out(dst, a, b);
      }
    };
    if (n == 1) {
      out.copy_(flat);
      return;
    }
    // Above the users' send/recv tags: a user's message in flight between the same two ranks
    // must never be taken for a step of the ring.
    constexpr int kRingTag = ProcessGroup::kMaxP2PTag + 1;
    auto recv_buf = at::empty({c}, input.options());
    auto send_buf = at::empty({c}, input.options());
    at::Tensor to_send = chunk((r - 1 + n) % n);
    const int right = (r + 1) % n;
    const int left = (r - 1 + n) % n;
    for (int s = 0; s < n - 1; ++s) {
      std::vector<at::Tensor> rv{recv_buf};
      std::vector<at::Tensor> sv{to_send};
      auto recv_work = c10d()->recv(rv, left, kRingTag + s);
      auto send_work = c10d()->send(sv, right, kRingTag + s);
      recv_work->wait(timeout());
      send_work->wait(timeout());
      const int k = ((r - s - 2) % n + n) % n;
      if (s == n - 2) {
        combine(out, recv_buf, chunk(k));  // k == r
      } else {
        combine(send_buf, recv_buf, chunk(k));
        to_send = send_buf;
      }
    }
    if (op == ReduceOp::AVG) out.div_(n);
  }

  // Gloo has no AVG: a SUM, then a division.
  void all_reduce(const at::Tensor& tensor, ReduceOp op) const override {
    std::vector<at::Tensor> ts{tensor};
    c10d::AllreduceOptions o;
    o.reduceOp = op == ReduceOp::AVG ? c10d::ReduceOp(c10d::ReduceOp::SUM) : to_c10d(op);
    wait_c10d(c10d()->allreduce(ts, o));
    if (op == ReduceOp::AVG) tensor.div_(size());
  }

  void barrier() const override { wait_c10d(c10d()->barrier()); }
};

}  // namespace

std::shared_ptr<Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int size, const ProcessGroup::Options& options) {
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = options.timeout;
  opts->devices.push_back(make_device(options));
  auto gloo_store = c10::make_intrusive<c10d::PrefixStore>("gloo", store);
  return std::make_shared<GlooBackend>(
      c10::make_intrusive<c10d::ProcessGroupGloo>(gloo_store, rank, size, opts), rank, size,
      options.timeout);
}

}  // namespace fsdpp::dist::detail
