// fsdpp's logits of a Llama checkpoint, for the Hugging Face transformers round trip
// (hf_roundtrip.py):
//
//   fsdpp_hf_tool logits CKPT IDS OUT.safetensors
//       through fsdpp-run on any number of ranks: builds the Llama CKPT/model_config.json
//       describes, fully_shards it per layer, loads CKPT with load_state_dict (resharding as
//       needed) and writes the logits (1, T, V) of the comma-separated token IDS (rank 0).
//   fsdpp_hf_tool logits-hf HF_DIR IDS OUT.safetensors
//       one process: load_hf_llama (names mapped, q/k rows permuted) into a plain Llama.
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "fsdpp/dist/world.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"

using namespace fsdpp;
namespace fs = std::filesystem;

namespace {

torch::Tensor parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  std::stringstream in(s);
  for (std::string tok; std::getline(in, tok, ',');) ids.push_back(std::stoll(tok));
  return torch::tensor(ids, torch::kLong).unsqueeze(0);  // (1, T)
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s logits CKPT IDS OUT | logits-hf HF_DIR IDS OUT\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  try {
    const auto ids = parse_ids(argv[3]);
    torch::NoGradGuard no_grad;
    if (mode == "logits-hf") {
      auto hf = models::load_hf_llama(argv[2]);
      models::Llama model(hf.config);
      models::load_named_tensors(*model, hf.tensors);
      state::save_safetensors(argv[4], {{"logits", model->forward(ids)}});
      return 0;
    }
    if (mode != "logits") return 2;
    auto world = dist::init_from_env();
    const fs::path ckpt = argv[2];
    const auto cfg = models::llama_config_from_json(read_text(ckpt / "model_config.json"),
                                                    (ckpt / "model_config.json").string());
    models::Llama model(cfg);
    FullyShardOptions o;
    o.mesh = world->mesh();
    for (auto& block : *model->layers) fully_shard(*block, o);
    fully_shard(model, o);
    state::LoadOptions lo;
    lo.skip_buffer = [](const std::string& n) { return models::is_non_persistent_buffer(n); };
    state::load_state_dict(ckpt, *model, nullptr, world->group(), lo);
    auto logits = fsdpp::forward(model, ids);
    if (world->rank() == 0) {
      state::save_safetensors(argv[4], {{"logits", logits}});
      std::printf("[hf_tool] logits %s of %s on %d rank(s)\n",
                  c10::str(logits.sizes()).c_str(), ckpt.string().c_str(), world->size());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[hf_tool] %s\n", e.what());
    return 1;
  }
}
