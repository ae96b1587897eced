// A student from a teacher: layers kept, experts kept by router load. See
// include/fsdpp/models/compress.h.
#include "fsdpp/models/compress.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/state/consolidate.h"
#include "hf_directory.h"

namespace fs = std::filesystem;
using fsdpp::models::detail::json;
using fsdpp::models::detail::read_text;

namespace fsdpp::models {
namespace {

struct Teacher {
  Architecture architecture = Architecture::kLlama;
  LlamaConfig llama;
  Qwen3MoeConfig moe;
  NamedTensors tensors;  // fsdpp names
  std::unique_ptr<data::Tokenizer> tokenizer;
  int64_t layers() const {
    return architecture == Architecture::kLlama ? llama.n_layers : moe.num_hidden_layers;
  }
  int64_t vocab_size() const {
    return architecture == Architecture::kLlama ? llama.vocab_size : moe.vocab_size;
  }
};

Teacher read_teacher(const fs::path& dir, const std::string& tokenizer_spec) {
  FSDPP_CHECK_AS(ConfigError, fs::is_directory(dir),
                 "[compress] teacher '{}' is not a directory; expected an fsdpp checkpoint or a "
                 "Hugging Face model directory", dir.string());
  Teacher t;
  if (fs::exists(dir / "index.json")) {
    const fs::path mc = dir / "model_config.json";
    FSDPP_CHECK_AS(ConfigError, fs::exists(mc),
                   "[compress] teacher '{}' has no model_config.json; cannot tell the model",
                   dir.string());
    const std::string text = read_text(mc);
    t.architecture = architecture_of_model_config(text, mc.string());
    if (t.architecture == Architecture::kLlama) {
      t.llama = llama_config_from_json(text, mc.string());
    } else {
      t.moe = qwen3_moe_config_from_hf(text, mc.string());
    }
    for (auto& [name, tensor] : state::read_full_model(dir)) {
      if (!is_non_persistent_buffer(name)) t.tensors.emplace_back(name, std::move(tensor));
    }
  } else {
    t.architecture =
        architecture_of_hf_config(detail::read_hf_config(dir), (dir / "config.json").string());
    if (t.architecture == Architecture::kLlama) {
      auto hf = load_hf_llama(dir);
      t.llama = hf.config;
      t.tensors = std::move(hf.tensors);
    } else {
      auto hf = load_hf_qwen3_moe(dir);
      t.moe = hf.config;
      t.tensors = std::move(hf.tensors);
    }
  }
  if (!tokenizer_spec.empty()) {
    t.tokenizer = data::make_tokenizer(tokenizer_spec);
  } else if (auto tok = data::model_tokenizer(dir)) {
    t.tokenizer = std::move(tok);
  } else if (t.vocab_size() == 256) {
    t.tokenizer = data::make_tokenizer("byte");
  }
  return t;
}

// "layers.12.mlp.gate.weight" -> 12; -1 for tensors outside the layers.
int64_t layer_of(const std::string& name, std::string* rest = nullptr) {
  if (name.rfind("layers.", 0) != 0) return -1;
  const auto dot = name.find('.', 7);
  if (rest) *rest = name.substr(dot);
  return std::stoll(name.substr(7, dot - 7));
}

std::vector<int64_t> choose_layers(const CompressOptions& o, int64_t n, std::string& rule) {
  if (!o.keep_layers.empty()) {
    FSDPP_CHECK_AS(ConfigError, o.num_layers == 0 || o.num_layers == int64_t(o.keep_layers.size()),
                   "[compress] --keep-layers lists {} layers but --num-layers is {}; give one",
                   o.keep_layers.size(), o.num_layers);
    for (size_t i = 0; i < o.keep_layers.size(); ++i) {
      const int64_t l = o.keep_layers[i];
      FSDPP_CHECK_AS(ConfigError, l >= 0 && l < n,
                     "[compress] --keep-layers {}: the teacher has layers 0..{}", l, n - 1);
      FSDPP_CHECK_AS(ConfigError, i == 0 || l > o.keep_layers[i - 1],
                     "[compress] --keep-layers [{}] must be increasing, without repeats",
                     fmt::join(o.keep_layers, ","));
    }
    rule = "--keep-layers";
    return o.keep_layers;
  }
  if (o.num_layers > 0) {
    rule = "--num-layers: evenly spaced, round(i*(L-1)/(N-1))";
    return evenly_spaced_layers(n, o.num_layers);
  }
  rule = "all";
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// The calibration text's first `n` tokens, cut into rows of `seq` (the last may be shorter).
std::vector<at::Tensor> calibration_rows(const CompressOptions& o, const data::Tokenizer& tok,
                                         int64_t seq) {
  std::ifstream in(o.calibration_file, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[compress] cannot read --calibration '{}'",
                 o.calibration_file.string());
  // A token is rarely longer than 64 bytes: read no more of a large corpus than that.
  std::string text(static_cast<size_t>(std::min<int64_t>(o.calibration_tokens * 64, 256 << 20)), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  // A binary (an executable, a safetensors file) tokenizes without complaint into nonsense.
  if (const auto nul = text.find('\0'); nul != std::string::npos) {
    FSDPP_THROW(ConfigError,
                "[compress] --calibration '{}' is not a text file: it has a NUL byte at offset "
                "{}; expected text (UTF-8) like the model was trained on",
                o.calibration_file.string(), nul);
  }
  auto ids = tok.encode(text);
  if (static_cast<int64_t>(ids.size()) > o.calibration_tokens) ids.resize(o.calibration_tokens);
  FSDPP_CHECK_AS(ConfigError, !ids.empty(), "[compress] --calibration '{}' gives no tokens",
                 o.calibration_file.string());
  const auto all = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
  std::vector<at::Tensor> rows;
  for (int64_t s = 0; s < all.size(0); s += seq) rows.push_back(all.slice(0, s, std::min(s + seq, all.size(0))));
  return rows;
}

int64_t numel_of(const NamedTensors& ts) {
  int64_t n = 0;
  for (const auto& [name, t] : ts) n += t.numel();
  return n;
}

std::string share(int64_t count, int64_t total) {
  return fmt::format("{:.1f}%", total > 0 ? 100.0 * static_cast<double>(count) / static_cast<double>(total) : 0.0);
}

}  // namespace

std::vector<int64_t> evenly_spaced_layers(int64_t layers, int64_t n) {
  FSDPP_CHECK_AS(ConfigError, n >= 1 && n <= layers,
                 "[compress] --num-layers {}: expected 1 <= N <= the teacher's {} layers", n, layers);
  if (n == 1) return {0};
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(static_cast<int64_t>(std::llround(static_cast<double>(i * (layers - 1)) / static_cast<double>(n - 1))));
  }
  return out;
}

std::vector<at::Tensor> router_load(Qwen3Moe& model, const std::vector<at::Tensor>& rows) {
  at::NoGradGuard no_grad;
  const auto& c = model->config();
  std::vector<at::Tensor> counts;
  for (const auto& row : rows) {
    auto out = model->forward(row.view({1, -1}), at::Tensor(), /*output_router_logits=*/true);
    for (size_t k = 0; k < out.router_logits.size(); ++k) {
      const auto ids = route_top_k(out.router_logits[k], c.num_experts_per_tok, c.norm_topk_prob).expert_ids;
      const auto n = at::bincount(ids.reshape({-1}), {}, c.num_experts);
      if (counts.size() <= k) counts.push_back(at::zeros({c.num_experts}, at::kLong));
      counts[k] += n;
    }
  }
  return counts;
}

std::vector<int64_t> most_loaded_experts(const at::Tensor& counts, int64_t k) {
  const auto c = counts.to(at::kLong).contiguous();
  std::vector<int64_t> order(static_cast<size_t>(c.numel()));
  std::iota(order.begin(), order.end(), 0);
  const int64_t* p = c.data_ptr<int64_t>();
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  order.resize(static_cast<size_t>(std::min<int64_t>(k, c.numel())));
  std::sort(order.begin(), order.end());
  return order;
}

CompressReport compress_checkpoint(const fs::path& teacher_dir, const fs::path& out,
                                   const CompressOptions& o) {
  Teacher t = read_teacher(teacher_dir, o.tokenizer);
  CompressReport r;
  r.architecture = t.architecture;
  r.teacher = teacher_dir.string();
  r.teacher_layers = t.layers();
  r.kept_layers = choose_layers(o, t.layers(), r.layer_rule);
  std::map<int64_t, int64_t> student_of;  // teacher layer -> student layer
  for (size_t j = 0; j < r.kept_layers.size(); ++j) student_of[r.kept_layers[j]] = static_cast<int64_t>(j);

  // Experts: measured on the whole teacher, then chosen per kept sparse layer.
  std::map<int64_t, std::vector<int64_t>> kept_experts;  // teacher layer -> teacher expert ids
  Qwen3MoeConfig student_moe = t.moe;
  if (t.architecture == Architecture::kLlama) {
    FSDPP_CHECK_AS(ConfigError, o.num_experts == 0,
                   "[compress] --num-experts {}: the teacher is a Llama (dense); only layers can "
                   "be dropped", o.num_experts);
  } else {
    const auto& c = t.moe;
    r.teacher_experts = r.student_experts = c.num_experts;
    r.teacher_top_k = r.student_top_k = c.num_experts_per_tok;
    if (o.num_experts > 0 && o.num_experts < c.num_experts) {
      FSDPP_CHECK_AS(ConfigError, !o.calibration_file.empty(),
                     "[compress] --num-experts {} drops experts by their router load: give "
                     "--calibration FILE (text in the teacher's tokenizer)", o.num_experts);
      FSDPP_CHECK_AS(ConfigError, t.tokenizer != nullptr,
                     "[compress] the teacher '{}' holds no tokenizer (fsdpp_tokenizer.json, "
                     "tokenizer.json or tokenizer.model) and its vocabulary ({}) is not bytes; "
                     "give --tokenizer with the model's own tokenizer (its tokenizer.json, the "
                     "directory holding it, or its .model file)", teacher_dir.string(), c.vocab_size);
      FSDPP_CHECK_AS(ConfigError, o.calibration_tokens >= 1,
                     "[compress] --calibration-tokens {}: expected at least 1", o.calibration_tokens);
      const int64_t seq = o.calibration_seq_len > 0 ? o.calibration_seq_len
                                                    : std::min<int64_t>(256, c.max_position_embeddings);
      FSDPP_CHECK_AS(ConfigError, seq <= c.max_position_embeddings,
                     "[compress] --calibration-seq-len {} exceeds max_position_embeddings {}", seq,
                     c.max_position_embeddings);
      const auto rows = calibration_rows(o, *t.tokenizer, seq);
      for (const auto& row : rows) {
        r.calibration_rows.push_back(row.size(0));
        r.calibration_tokens += row.size(0);
      }
      Qwen3Moe model(c);
      load_named_tensors(*model, t.tensors);
      const auto counts = router_load(model, rows);
      r.student_experts = o.num_experts;
      r.student_top_k = std::min(c.num_experts_per_tok, o.num_experts);
      size_t k = 0;
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (!c.is_sparse_layer(l)) continue;
        const auto& n = counts.at(k++);
        if (!student_of.count(l)) continue;
        CompressedLayerExperts e;
        e.teacher_layer = l;
        e.student_layer = student_of[l];
        e.counts.assign(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + n.numel());
        e.kept = most_loaded_experts(n, o.num_experts);
        for (int64_t x = 0; x < c.num_experts; ++x) {
          if (!std::binary_search(e.kept.begin(), e.kept.end(), x)) e.dropped.push_back(x);
        }
        kept_experts[l] = e.kept;
        r.experts.push_back(std::move(e));
      }
    } else {
      FSDPP_CHECK_AS(ConfigError, o.num_experts <= c.num_experts,
                     "[compress] --num-experts {} is more than the teacher's {}", o.num_experts,
                     c.num_experts);
    }
    student_moe.num_hidden_layers = static_cast<int64_t>(r.kept_layers.size());
    student_moe.num_experts = r.student_experts;
    student_moe.num_experts_per_tok = r.student_top_k;
    // Each kept layer stays dense or sparse: the dense ones listed by their new ids.
    student_moe.decoder_sparse_step = 1;
    student_moe.mlp_only_layers.clear();
    for (size_t j = 0; j < r.kept_layers.size(); ++j) {
      if (!c.is_sparse_layer(r.kept_layers[j])) student_moe.mlp_only_layers.push_back(static_cast<int64_t>(j));
    }
    student_moe.validate();
  }

  // The student's tensors: the teacher's, renamed; experts and router rows selected.
  NamedTensors student;
  for (const auto& [name, tensor] : t.tensors) {
    std::string rest;
    const int64_t l = layer_of(name, &rest);
    if (l < 0) {
      student.emplace_back(name, tensor);
      continue;
    }
    if (!student_of.count(l)) continue;
    at::Tensor kept = tensor;
    if (auto it = kept_experts.find(l); it != kept_experts.end() &&
        (rest.rfind(".mlp.experts.", 0) == 0 || rest == ".mlp.gate.weight")) {
      kept = tensor.index_select(0, at::tensor(it->second, at::kLong));
    }
    student.emplace_back(fmt::format("layers.{}{}", student_of[l], rest), kept);
  }
  r.teacher_parameters = numel_of(t.tensors);
  r.student_parameters = numel_of(student);

  std::map<std::string, std::string> files;
  if (t.tokenizer) files = data::tokenizer_files(*t.tokenizer);
  if (t.architecture == Architecture::kLlama) {
    LlamaConfig s = t.llama;
    s.n_layers = static_cast<int64_t>(r.kept_layers.size());
    s.validate();
    files["model_config.json"] = llama_config_to_json(s);
  } else {
    files["model_config.json"] =
        qwen3_moe_config_to_hf(student_moe, student.front().second.scalar_type());
  }
  files["compress.json"] = r.json();
  state::write_full_checkpoint(out, student, {}, files);
  return r;
}

std::string CompressReport::text() const {
  std::string s = fmt::format("compress: {} teacher {}\n", architecture_name(architecture), teacher);
  s += fmt::format("  layers: kept {} of {}: [{}] ({})\n", kept_layers.size(), teacher_layers,
                   fmt::join(kept_layers, ", "), layer_rule);
  std::vector<std::string> pairs;
  for (size_t i = 0; i < kept_layers.size(); ++i) pairs.push_back(fmt::format("{}:{}", i, kept_layers[i]));
  s += fmt::format("  distillation.layer_map: [{}] (the student's layers and the teacher's they "
                   "were; [auto] reads them from compress.json)\n",
                   fmt::join(pairs, ", "));
  if (architecture == Architecture::kQwen3Moe) {
    s += fmt::format("  experts per sparse layer: {} -> {}, top-k {} -> {}\n", teacher_experts,
                     student_experts, teacher_top_k, student_top_k);
  }
  if (!experts.empty()) {
    s += fmt::format("  router load measured on {} calibration tokens in {} row(s), {} choices "
                     "each; the most chosen experts kept (equal counts: the lower id)\n",
                     calibration_tokens, calibration_rows.size(), teacher_top_k);
    for (const auto& e : experts) {
      const int64_t total = std::accumulate(e.counts.begin(), e.counts.end(), int64_t{0});
      auto list = [&](const std::vector<int64_t>& ids) {
        std::vector<std::string> parts;
        for (int64_t x : ids) parts.push_back(fmt::format("{} ({})", x, share(e.counts[size_t(x)], total)));
        return fmt::format("{}", fmt::join(parts, ", "));
      };
      int64_t kept_load = 0;
      for (int64_t x : e.kept) kept_load += e.counts[size_t(x)];
      s += fmt::format("  layer {} -> {}: kept {} = {} of the load; dropped {}\n", e.teacher_layer,
                       e.student_layer, list(e.kept), share(kept_load, total), list(e.dropped));
    }
  }
  s += fmt::format("  parameters: {} -> {} ({:.1f}%)\n", teacher_parameters, student_parameters,
                   teacher_parameters > 0 ? 100.0 * double(student_parameters) / double(teacher_parameters) : 0.0);
  return s;
}

std::string CompressReport::json() const {
  detail::json j;
  j["format"] = "fsdpp.compress";
  j["architecture"] = architecture_name(architecture);
  j["teacher"] = teacher;
  j["teacher_layers"] = teacher_layers;
  j["kept_layers"] = kept_layers;
  // distillation.layer_map's pairs for this student: its layer i was the teacher's kept[i].
  std::vector<std::string> layer_map;
  for (size_t i = 0; i < kept_layers.size(); ++i) layer_map.push_back(fmt::format("{}:{}", i, kept_layers[i]));
  j["layer_map"] = layer_map;
  j["layer_rule"] = layer_rule;
  j["num_experts"] = {{"teacher", teacher_experts}, {"student", student_experts}};
  j["num_experts_per_tok"] = {{"teacher", teacher_top_k}, {"student", student_top_k}};
  j["calibration"] = {{"tokens", calibration_tokens}, {"rows", calibration_rows}};
  j["experts"] = detail::json::array();
  for (const auto& e : experts) {
    j["experts"].push_back({{"teacher_layer", e.teacher_layer}, {"student_layer", e.student_layer},
                            {"counts", e.counts}, {"kept", e.kept}, {"dropped", e.dropped}});
  }
  j["parameters"] = {{"teacher", teacher_parameters}, {"student", student_parameters}};
  return j.dump(2) + "\n";
}

}  // namespace fsdpp::models
