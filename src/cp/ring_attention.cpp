// context_attention's RING method: the K/V blocks travel rank to rank (rank r sends to r+1 and
// receives from r-1), so at step s rank r holds the block of rank r-s. Each rank attends its two
// query chunks to the visiting block's two key chunks, skipping the pairs whose keys all come
// after the queries, and merges the partial outputs by their log-sum-exp. In backward the blocks
// go round again, each carrying the accumulator of its dk and dv; after the last step one more
// hop brings every accumulator home to the block's owner.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <cmath>
#include <optional>
#include <vector>

#include "attention_block.h"
#include "context_methods.h"
#include "fsdpp/common/error.h"
#include "fsdpp/cp/sequence_layout.h"
#include "fsdpp/dist/autograd_group.h"

namespace fsdpp::cp::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ring's messages get tags of their own, distinct per pass, step and tensor, so that a
// message is never taken for another's: kRingTagBase + ((pass * kRingMaxSteps + step) * 4 + t).
constexpr int kRingTagBase = 1 << 24;
constexpr int kRingMaxSteps = 1 << 16;
enum class Pass { FORWARD = 0, BACKWARD = 1 };
enum Message { K = 0, V = 1, DK = 2, DV = 3 };

int ring_tag(Pass pass, int step, Message m) {
  return kRingTagBase + (static_cast<int>(pass) * kRingMaxSteps + step) * 4 + m;
}

// This rank's place in the ring.
struct Ring {
  GroupPtr group;
  std::string what;
  int rank = 0;
  int world = 1;
  int64_t chunk = 0;  // tokens per chunk: T / (2W)

  int right() const { return (rank + 1) % world; }
  int left() const { return (rank + world - 1) % world; }
  // Whose block this rank holds at `step`.
  int owner_at(int step) const { return ((rank - step) % world + world) % world; }
};

// Tensors sent to the next rank while the previous rank's come in, each tensor with its own tag.
struct Exchange {
  std::vector<at::Tensor> received;
  std::vector<dist::Work> works;
  void wait() {
    for (auto& w : works) w.wait();
  }
};

Exchange pass_on(const Ring& ring, const std::vector<at::Tensor>& outgoing,
                 const std::vector<int>& tags) {
  Exchange e;
  for (size_t i = 0; i < outgoing.size(); ++i) {
    auto out = outgoing[i].contiguous();
    e.received.push_back(at::empty_like(out));
    e.works.push_back(ring.group->send_async(out, ring.right(), tags[i], {ring.what}));
    e.works.push_back(ring.group->recv_async(e.received.back(), ring.left(), tags[i],
                                             {ring.what}));
  }
  return e;
}

// A pair of chunks: query chunk `a` (0 head, 1 tail of this rank) against key chunk `b` of the
// visiting block; its global chunk indices, and whether it is computed at all.
struct ChunkPair {
  int a = 0;
  int b = 0;
  int64_t q_chunk = 0;
  int64_t k_chunk = 0;
  bool visible() const { return k_chunk <= q_chunk; }
  bool diagonal() const { return k_chunk == q_chunk; }
};

// The pairs of this rank's query chunks and the block of `owner` that see at least one key.
std::vector<ChunkPair> visible_pairs(const Ring& ring, int owner) {
  const auto mine = head_tail_chunks(ring.rank, ring.world);
  const auto theirs = head_tail_chunks(owner, ring.world);
  std::vector<ChunkPair> pairs;
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      ChunkPair p{a, b, a == 0 ? mine.head : mine.tail, b == 0 ? theirs.head : theirs.tail};
      if (p.visible()) pairs.push_back(p);
    }
  }
  return pairs;
}

// The causal mask of a diagonal pair over its global positions; none for a pair whose keys all
// come before its queries.
at::Tensor pair_mask(const Ring& ring, const ChunkPair& p, const at::Device& device) {
  if (!p.diagonal()) return {};
  auto positions = [&](int64_t chunk) {
    return at::arange(chunk * ring.chunk, (chunk + 1) * ring.chunk,
                      at::TensorOptions(at::kLong).device(device));
  };
  return causal_mask(positions(p.q_chunk), positions(p.k_chunk));
}

// One chunk (0 head, 1 tail) of a tensor whose dim `dim` holds this rank's two chunks.
at::Tensor chunk_of(const at::Tensor& x, int64_t dim, int which, int64_t chunk) {
  return x.narrow(dim, which * chunk, chunk);
}

// Merges the visiting block's partial attention into each query chunk's accumulator.
void attend_visiting(const Ring& ring, int owner, const at::Tensor& qg, const at::Tensor& kb,
                     const at::Tensor& vb, double scale, std::array<Partial, 2>& acc) {
  const int64_t c = ring.chunk;
  for (const auto& p : visible_pairs(ring, owner)) {
    auto part = attend_block(chunk_of(qg, 3, p.a, c), chunk_of(kb, 2, p.b, c).to(at::kFloat),
                             chunk_of(vb, 2, p.b, c).to(at::kFloat),
                             pair_mask(ring, p, qg.device()), scale);
    merge_partial(acc[p.a], part);
  }
}

// The forward ring: out (B, Hkv, G, T/W, D) and lse (B, Hkv, G, T/W), float32.
Partial ring_forward(const Ring& ring, const at::Tensor& qg, const at::Tensor& k,
                     const at::Tensor& v, double scale) {
  std::array<Partial, 2> acc;
  at::Tensor kb = k.contiguous(), vb = v.contiguous();
  for (int step = 0; step < ring.world; ++step) {
    std::optional<Exchange> next;
    if (step + 1 < ring.world) {
      next = pass_on(ring, {kb, vb},
                     {ring_tag(Pass::FORWARD, step, K), ring_tag(Pass::FORWARD, step, V)});
    }
    attend_visiting(ring, ring.owner_at(step), qg, kb, vb, scale, acc);  // while they travel
    if (next) {
      next->wait();
      kb = next->received[0];
      vb = next->received[1];
    }
  }
  return {at::cat({acc[0].out, acc[1].out}, 3), at::cat({acc[0].lse, acc[1].lse}, 3)};
}

// What the backward of every block reads: this rank's queries, output gradient and row
// statistics, grouped (B, Hkv, G, T/W, ...) and float32.
struct RowState {
  at::Tensor q;
  at::Tensor dout;
  at::Tensor lse;
  at::Tensor delta;
};

// Adds the visiting block's share of the gradients: dq (this rank's) and the block's dk, dv.
void backward_visiting(const Ring& ring, int owner, const RowState& rows, const at::Tensor& kb,
                       const at::Tensor& vb, double scale, at::Tensor& dq, at::Tensor& dkb,
                       at::Tensor& dvb) {
  const int64_t c = ring.chunk;
  for (const auto& p : visible_pairs(ring, owner)) {
    auto g = block_backward(chunk_of(rows.q, 3, p.a, c), chunk_of(kb, 2, p.b, c).to(at::kFloat),
                            chunk_of(vb, 2, p.b, c).to(at::kFloat),
                            pair_mask(ring, p, kb.device()), scale,
                            chunk_of(rows.dout, 3, p.a, c), chunk_of(rows.lse, 3, p.a, c),
                            chunk_of(rows.delta, 3, p.a, c));
    chunk_of(dq, 3, p.a, c).add_(g.dq);
    chunk_of(dkb, 2, p.b, c).add_(g.dk);
    chunk_of(dvb, 2, p.b, c).add_(g.dv);
  }
}

// The backward ring: dq (grouped) of this rank's queries, and this rank's own dk, dv, float32.
BlockGrads ring_backward(const Ring& ring, const RowState& rows, const at::Tensor& k,
                         const at::Tensor& v, double scale) {
  auto dq = at::zeros_like(rows.q);
  at::Tensor kb = k.contiguous(), vb = v.contiguous();
  auto dkb = at::zeros(k.sizes(), k.options().dtype(at::kFloat));
  auto dvb = at::zeros_like(dkb);
  for (int step = 0; step < ring.world; ++step) {
    std::optional<Exchange> next_kv;
    if (step + 1 < ring.world) {
      next_kv = pass_on(ring, {kb, vb},
                        {ring_tag(Pass::BACKWARD, step, K), ring_tag(Pass::BACKWARD, step, V)});
    }
    backward_visiting(ring, ring.owner_at(step), rows, kb, vb, scale, dq, dkb, dvb);
    if (ring.world == 1) break;  // the block and its gradients are home already
    // The accumulators follow their block; after the last step this is the hop home.
    auto next_grads = pass_on(
        ring, {dkb, dvb}, {ring_tag(Pass::BACKWARD, step, DK), ring_tag(Pass::BACKWARD, step, DV)});
    if (next_kv) {
      next_kv->wait();
      kb = next_kv->received[0];
      vb = next_kv->received[1];
    }
    next_grads.wait();
    dkb = next_grads.received[0];
    dvb = next_grads.received[1];
  }
  return {dq, dkb, dvb};
}

Ring make_ring(const GroupPtr& group, const std::string& what, int64_t local_length) {
  FSDPP_CHECK_AS(ConfigError, group->size() <= kRingMaxSteps,
                 "[cp] {}: a ring of {} ranks; at most {}", what, group->size(), kRingMaxSteps);
  return Ring{group, what, group->rank(), group->size(), local_length / 2};
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const GroupPtr& group, const std::string& what) {
    dist::save_group(ctx, group, what);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    auto ring = make_ring(group, what, q.size(2));
    auto whole = ring_forward(ring, group_heads(q, k.size(1)), k, v, scale);
    auto out = ungroup_heads(whole.out).to(q.scalar_type());
    ctx->save_for_backward({q, k, v, out, whole.lse});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = dist::load_group(ctx);
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3];
    const int64_t kv_heads = k.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    RowState rows{group_heads(q, kv_heads), group_heads(grads[0], kv_heads), saved[4], {}};
    rows.delta = row_delta(rows.dout, group_heads(out, kv_heads));
    auto ring = make_ring(g.group, g.what, q.size(2));
    auto d = ring_backward(ring, rows, k, v, scale);
    return {ungroup_heads(d.dq).to(q.scalar_type()), d.dk.to(k.scalar_type()),
            d.dv.to(v.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const GroupPtr& group, const std::string& what) {
  return RingAttention::apply(q, k, v, group, what);
}

}  // namespace fsdpp::cp::detail
