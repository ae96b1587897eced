#include "init_from.h"

#include <algorithm>
#include <fstream>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/state/state_dict.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[train] model.init_from: cannot read '{}'", p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

InitSource::InitSource(const fs::path& dir) : dir_(dir) {
  FSDPP_CHECK_AS(ConfigError, fs::is_directory(dir),
                 "[train] model.init_from='{}' is not a directory; expected an fsdpp checkpoint "
                 "(checkpoint-<step>) or a Hugging Face model directory (config.json + "
                 "safetensors)",
                 dir.string());
  if (fs::exists(dir / "index.json")) {
    FSDPP_CHECK_AS(ConfigError, fs::exists(dir / "model_config.json"),
                   "[train] model.init_from='{}' has no model_config.json; cannot tell the "
                   "model's shape",
                   dir.string());
    config_ = models::llama_config_from_json(read_text(dir / "model_config.json"),
                                             (dir / "model_config.json").string());
  } else {
    FSDPP_CHECK_AS(ConfigError, fs::exists(dir / "config.json"),
                   "[train] model.init_from='{}' has neither index.json (an fsdpp checkpoint) nor "
                   "config.json (a Hugging Face model)",
                   dir.string());
    hf_ = true;
    config_ = models::llama_config_from_hf(read_text(dir / "config.json"),
                                           (dir / "config.json").string());
  }
  tokenizer_ = data::load_tokenizer(dir);
  if (!tokenizer_ && fs::exists(dir / data::kSentencePieceModelFile)) {
    tokenizer_ = std::make_unique<data::SentencePieceTokenizer>(
        (dir / data::kSentencePieceModelFile).string());
  }
}

std::vector<std::string> InitSource::apply_shape(ModelSection& m) const {
  std::vector<std::string> notes;
  auto take = [&](const char* key, auto& field, auto value) {
    if (field != value) {
      notes.push_back(fmt::format("model.{}: {} in the config, {} in {}", key, field, value,
                                  dir_.string()));
    }
    field = value;
  };
  const auto& c = config_;
  take("vocab_size", m.vocab_size, c.vocab_size);
  take("dim", m.dim, c.dim);
  take("n_layers", m.n_layers, c.n_layers);
  take("n_heads", m.n_heads, c.n_heads);
  take("n_kv_heads", m.n_kv_heads, c.kv_heads());
  take("ffn_hidden", m.ffn_hidden, c.ffn_hidden_dim());
  take("max_seq_len", m.max_seq_len, c.max_seq_len);
  take("norm_eps", m.norm_eps, c.norm_eps);
  take("rope_theta", m.rope_theta, c.rope_theta);
  take("tie_embeddings", m.tie_embeddings, c.tie_embeddings);
  // 0 means "derived" for these keys (n_heads, Llama's rule, the tokenizer's): not a change.
  notes.erase(std::remove_if(notes.begin(), notes.end(),
                             [&](const std::string& n) {
                               return (n.rfind("model.n_kv_heads: 0 ", 0) == 0 &&
                                       c.kv_heads() == c.n_heads) ||
                                      n.rfind("model.ffn_hidden: 0 ", 0) == 0 ||
                                      n.rfind("model.vocab_size: 0 ", 0) == 0;
                             }),
              notes.end());
  return notes;
}

void InitSource::load_before_sharding(models::Llama& model) const {
  if (!hf_) return;
  auto hf = models::load_hf_llama(dir_);
  models::load_named_tensors(*model, hf.tensors);
}

void InitSource::load_after_sharding(models::Llama& model,
                                     const std::shared_ptr<dist::ProcessGroup>& group) const {
  if (hf_) return;
  state::LoadOptions lo;
  lo.skip_buffer = [](const std::string& n) { return models::is_non_persistent_buffer(n); };
  state::load_state_dict(dir_, *model, /*optimizer=*/nullptr, group, lo);
}

}  // namespace fsdpp::train::detail
