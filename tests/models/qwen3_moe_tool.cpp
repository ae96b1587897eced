// fsdpp's side of the Qwen3-MoE checks against transformers (qwen3_moe_hf.py):
//
//   fsdpp_qwen3_moe_tool forward HF_DIR IDS OUT.safetensors
//       one process: load_hf_qwen3_moe into a plain Qwen3Moe; writes logits (B,T,V), aux_loss,
//       loss (cross entropy against IDS shifted by one, plus the weighted aux loss) and
//       router_logits.<k> of the k-th sparse layer, and grad.<name> of every parameter after
//       the loss's backward.
//   fsdpp_qwen3_moe_tool save HF_DIR OUT_DIR
//       load_hf_qwen3_moe, into the model, then save_hf_qwen3_moe of the model's parameters.
//   fsdpp_qwen3_moe_tool sharded HF_DIR IDS OUT.safetensors
//       through fsdpp-run on any number of ranks: the same model made FSDP units by
//       transformer_layer_policy({"Qwen3MoeDecoderLayer"}); forward, backward, and rank 0
//       writes logits, loss, aux_loss and grad_norm (clip_grad_norm_'s global norm).
//   fsdpp_qwen3_moe_tool ckpt CKPT IDS OUT.safetensors
//       through fsdpp-run: an fsdpp checkpoint (fsdpp-ckpt import-hf's, compress's): the model
//       made from its model_config.json, sharded as above, loaded with load_state_dict; forward
//       with the router logits, and rank 0 writes logits, aux_loss and loss.
//
// IDS: comma-separated token ids, rows separated by ';' (every row the same length).
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "fsdpp/dist/world.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"

using namespace fsdpp;

namespace {

torch::Tensor parse_ids(const std::string& s) {
  std::vector<torch::Tensor> rows;
  std::stringstream all(s);
  for (std::string row; std::getline(all, row, ';');) {
    std::vector<int64_t> ids;
    std::stringstream in(row);
    for (std::string tok; std::getline(in, tok, ',');) ids.push_back(std::stoll(tok));
    rows.push_back(torch::tensor(ids, torch::kLong));
  }
  return torch::stack(rows);  // (B, T)
}

// Next-token targets: position t predicts token t+1; the last position is ignored.
torch::Tensor next_tokens(const torch::Tensor& ids) {
  auto targets = torch::full_like(ids, -100);
  const int64_t T = ids.size(1);
  if (T > 1) targets.narrow(1, 0, T - 1).copy_(ids.narrow(1, 1, T - 1));
  return targets;
}

models::Qwen3Moe load(const std::string& dir) {
  auto hf = models::load_hf_qwen3_moe(dir);
  models::Qwen3Moe model(hf.config);
  models::load_named_tensors(*model, hf.tensors);
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 4) {
    std::fprintf(stderr, "usage: %s forward|sharded HF_DIR IDS OUT | ckpt CKPT IDS OUT | save HF_DIR OUT_DIR\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  try {
    if (mode == "save" && argc == 4) {
      auto model = load(argv[2]);
      models::NamedTensors params;
      for (const auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());
      models::save_hf_qwen3_moe(argv[3], model->config(), params);
      return 0;
    }
    if (argc != 5) return 2;
    const auto ids = parse_ids(argv[3]);
    if (mode == "forward") {
      auto model = load(argv[2]);
      auto out = model->forward(ids, next_tokens(ids), /*output_router_logits=*/true);
      out.loss.backward();
      std::vector<std::pair<std::string, at::Tensor>> tensors = {{"logits", out.logits.detach()},
                                                                 {"aux_loss", out.aux_loss.detach()},
                                                                 {"loss", out.loss.detach()}};
      for (size_t k = 0; k < out.router_logits.size(); ++k) {
        tensors.emplace_back("router_logits." + std::to_string(k), out.router_logits[k].detach());
      }
      for (const auto& p : model->named_parameters()) {
        tensors.emplace_back("grad." + p.key(), p.value().grad());
      }
      state::save_safetensors(argv[4], tensors);
      return 0;
    }
    if (mode == "ckpt") {
      auto world = dist::init_from_env();
      std::ifstream in(std::string(argv[2]) + "/model_config.json", std::ios::binary);
      const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      models::Qwen3Moe model(models::qwen3_moe_config_from_hf(text, "model_config.json"));
      FullyShardOptions o;
      o.mesh = world->mesh();
      apply_fully_shard(*model, transformer_layer_policy({"Qwen3MoeDecoderLayer"}), o);
      state::load_state_dict(argv[2], *model, nullptr, world->group());
      at::NoGradGuard no_grad;
      auto out = fsdpp::forward(model, ids, next_tokens(ids), true);
      if (world->rank() == 0) {
        state::save_safetensors(argv[4], {{"logits", out.logits.detach()},
                                          {"loss", out.loss.detach()},
                                          {"aux_loss", out.aux_loss.detach()}});
      }
      return 0;
    }
    if (mode != "sharded") return 2;
    auto world = dist::init_from_env();
    auto model = load(argv[2]);  // every rank the whole model, then shards of it
    FullyShardOptions o;
    o.mesh = world->mesh();
    const auto units =
        apply_fully_shard(*model, transformer_layer_policy({"Qwen3MoeDecoderLayer"}), o);
    auto out = fsdpp::forward(model, ids, next_tokens(ids), true);
    out.loss.backward();
    const double norm = clip_grad_norm_(*model, 1e9);
    if (world->rank() == 0) {
      state::save_safetensors(argv[4], {{"logits", out.logits.detach()},
                                        {"loss", out.loss.detach()},
                                        {"aux_loss", out.aux_loss.detach()},
                                        {"grad_norm", torch::tensor(norm, torch::kDouble)}});
      std::printf("[qwen3_moe_tool] %zu units on %d rank(s), loss %.6f, grad norm %.6f\n",
                  units.size(), world->size(), out.loss.item<double>(), norm);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[qwen3_moe_tool] %s\n", e.what());
    return 1;
  }
}
