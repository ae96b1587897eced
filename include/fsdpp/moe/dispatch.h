#pragma once
// Dropless token-choice dispatch over an expert-parallel group: every (token, choice) pair goes
// to the rank that holds its expert, the experts run over their rows together, and the results
// come back to be combined with the routing weights. Nothing is dropped and no capacity is
// padded: a rank may send or receive any number of rows, zero included.
//
//   // E experts, rank r of the ep group holds experts [r*E/ep, (r+1)*E/ep)
//   auto d = moe::ExpertDispatch(x, expert_ids, E, ep_group, "layers.0.mlp");  // (N,D), (N,k)
//   d.tokens;             // (M,D) the rows this rank's experts compute, expert-major
//   d.tokens_per_expert;  // (E/ep) how many of them each local expert takes
//   auto y = experts(d.tokens, d.tokens_per_expert);   // (M,D), one matmul chain per expert
//   auto out = d.combine(y, weights);                  // (N,D) sum_j w[n,j] * y(n, j)
//
// The collectives, per dispatch and combine (bytes as the group's counters count them, rows to
// the other ranks only; D the hidden size, b the bytes of an element):
//   1. all-to-all of the counts: E int64 per rank, (ep-1) * E/ep * 8 bytes sent. No gradient.
//   2. all-to-all of the rows (forward): b * D * (pairs this rank routes to experts elsewhere).
//   3. all-to-all of the results (combine): b * D * (rows this rank's experts received from
//      elsewhere).
// Backward runs 3 then 2 in reverse, the same byte counts swapped. The only host
// synchronisation is reading the counts, which size the splits.
//
// The order of the pairs is the single process's: sorted by expert (stable), so each expert sees
// its tokens in batch order and the combine adds each token's k results in the order of their
// experts, as Qwen3MoeExperts does without parallelism.

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdpp/moe/all_to_all.h"
#include "fsdpp/moe/permute.h"

namespace fsdpp::moe {

class ExpertDispatch {
 public:
  // x (N,D); expert_ids (N,k) int64 in [0, num_experts). num_experts must divide by the group's
  // size (ConfigError otherwise). Collective over `group`: issues the two forward all-to-alls.
  ExpertDispatch(const at::Tensor& x, const at::Tensor& expert_ids, int64_t num_experts,
                 GroupPtr group, std::string what = "moe");

  // y (M,D): the local experts' outputs for `tokens`, row for row -> (N,D), each token's k
  // results multiplied by weights (N,k) and summed. Collective: the all-to-all back.
  at::Tensor combine(const at::Tensor& y, const at::Tensor& weights) const;

  at::Tensor tokens;                       // (M,D) expert-major
  std::vector<int64_t> tokens_per_expert;  // (E/ep): rows of each local expert in `tokens`
  std::vector<int64_t> send_splits;        // (ep): pairs sent to each rank
  std::vector<int64_t> recv_splits;        // (ep): rows received from each rank
  int64_t experts_per_rank = 0;
  int64_t first_expert = 0;                // this rank's first expert

 private:
  GroupPtr group_;
  std::string what_;
  at::Tensor order_;     // (N*k) the pairs sorted by expert: pair p = n*k + j
  at::Tensor token_of_;  // (N*k) the token of each sorted pair
  ExpertMajorOrder permutation_;
  int64_t num_tokens_ = 0;
};

}  // namespace fsdpp::moe
