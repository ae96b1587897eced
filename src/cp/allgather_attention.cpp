// context_attention's ALLGATHER method (torchtitan's): every rank gathers the whole sequence's K
// and V, attends its own queries against all of it under the causal mask of their global
// positions, and in backward sends each rank the sum over ranks of its K/V slice's gradient.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <vector>

#include "attention_block.h"
#include "context_methods.h"
#include "fsdpp/cp/sequence_layout.h"
#include "fsdpp/dist/autograd_group.h"

namespace fsdpp::cp::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every rank's (B, Hkv, T/W, D) pieces gathered, in the global order of the sequence:
// (B, Hkv, T, D) each. Two all-gathers in flight together.
std::vector<at::Tensor> gather_sequence(const std::vector<at::Tensor>& pieces,
                                        const GroupPtr& group, const std::string& what) {
  const int world = group->size();
  std::vector<at::Tensor> gathered;
  std::vector<dist::Work> works;
  for (const auto& piece : pieces) {
    auto in = piece.contiguous();
    auto sizes = in.sizes().vec();
    sizes[0] *= world;
    gathered.push_back(at::empty(sizes, in.options()));  // (W*B, Hkv, T/W, D), rank order
    works.push_back(group->all_gather_into_tensor_async(gathered.back(), in, {what}));
  }
  for (auto& w : works) w.wait();
  std::vector<at::Tensor> whole;
  for (const auto& g : gathered) whole.push_back(unshard_sequence(g.chunk(world, 0), 2));
  return whole;
}

// Each (B, Hkv, T, D) gradient of the whole sequence -> this rank's slice of its sum over the
// ranks (B, Hkv, T/W, D), float32. Two reduce-scatters in flight together.
std::vector<at::Tensor> scatter_sequence(const std::vector<at::Tensor>& wholes,
                                         const GroupPtr& group, const std::string& what) {
  const int world = group->size();
  std::vector<at::Tensor> mine;
  std::vector<dist::Work> works;
  for (const auto& whole : wholes) {
    std::vector<at::Tensor> by_rank;  // rank r's head-tail slice at row r
    for (int r = 0; r < world; ++r) by_rank.push_back(shard_sequence(whole, 2, r, world));
    auto in = at::cat(by_rank);  // (W*B, Hkv, T/W, D): rank r's slice at rows r*B..
    mine.push_back(at::empty(by_rank[0].sizes(), in.options()));
    works.push_back(group->reduce_scatter_tensor_async(mine.back(), in, dist::ReduceOp::SUM,
                                                       {what}));
  }
  for (auto& w : works) w.wait();
  return mine;
}

// The causal mask of this rank's queries against every key of the sequence, (T/W, T).
at::Tensor local_mask(int64_t length, const GroupPtr& group, const at::Device& device) {
  auto qpos = sequence_positions(length, group->rank(), group->size()).to(device);
  return causal_mask(qpos, at::arange(length, at::TensorOptions(at::kLong).device(device)));
}

struct AllGatherAttention : torch::autograd::Function<AllGatherAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const GroupPtr& group, const std::string& what) {
    dist::save_group(ctx, group, what);
    auto kv = gather_sequence({k, v}, group, what);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    auto mask = local_mask(kv[0].size(2), group, q.device());
    auto part = attend_block(group_heads(q, k.size(1)), kv[0].to(at::kFloat),
                             kv[1].to(at::kFloat), mask, scale);
    auto out = ungroup_heads(part.out).to(q.scalar_type());
    ctx->save_for_backward({q, kv[0], kv[1], out, part.lse});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = dist::load_group(ctx);
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k_all = saved[1], &v_all = saved[2], &out = saved[3];
    const int64_t kv_heads = k_all.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    auto dout = group_heads(grads[0], kv_heads);
    auto delta = row_delta(dout, group_heads(out, kv_heads));
    auto mask = local_mask(k_all.size(2), g.group, q.device());
    auto block = block_backward(group_heads(q, kv_heads), k_all.to(at::kFloat),
                                v_all.to(at::kFloat), mask, scale, dout, saved[4], delta);
    auto dkv = scatter_sequence({block.dk, block.dv}, g.group, g.what);
    return {ungroup_heads(block.dq).to(q.scalar_type()), dkv[0].to(k_all.scalar_type()),
            dkv[1].to(v_all.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor allgather_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const GroupPtr& group, const std::string& what) {
  return AllGatherAttention::apply(q, k, v, group, what);
}

}  // namespace fsdpp::cp::detail
