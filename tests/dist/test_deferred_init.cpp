// Deferred initialisation (fsdpp/fsdp/deferred_init.h) against the eager path: a model made on
// the meta device, sharded, given storage and drawn (init_exact) holds in every rank's shards
// the very bits of the same model built whole from the seed and then sharded, under FSDP on any
// number of ranks and strategy, HYBRID, tensor parallelism, expert parallelism and pipeline
// stages, for both of fsdpp's models. Per-shard init is the same on any number of ranks (and not
// the eager values); a user's param_init_fn sees its shards; loading a Hugging Face directory or
// an fsdpp checkpoint into shards equals loading it whole; and the heap's peak while doing all
// this is this rank's shards plus one chunk, counted by an allocator hook.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/deferred_init.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/state_dict.h"
#include "full_checkpoint.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;
namespace fs = std::filesystem;

namespace {

models::LlamaConfig tiny_llama(int64_t n_layers = 3) {
  return fsdpp::test::uneven_llama(n_layers, /*max_seq_len=*/16, /*seed=*/11);
}

models::Qwen3MoeConfig tiny_moe() {
  auto c = fsdpp::test::tiny_moe(/*n_layers=*/3, /*num_experts=*/8, /*seed=*/5);
  c.vocab_size = 61;
  c.mlp_only_layers = {1};
  c.initializer_range = 0.1;
  return c;
}

// Small chunks, so that every parameter is drawn in many (and the 16-element rule is exercised).
const InitOptions kSmallChunks{.chunk_bytes = 1000};

// Every parameter's local shard and every buffer of `b` equal `a`'s, bit for bit.
void expect_same_shards(torch::nn::Module& a, torch::nn::Module& b, const std::string& what) {
  auto va = sharded_params(a), vb = sharded_params(b);
  ASSERT_EQ(va.size(), vb.size()) << what;
  for (size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(va[i].fqn, vb[i].fqn) << what;
    EXPECT_FALSE(vb[i].local_shard.is_meta()) << what << ": " << vb[i].fqn;
    EXPECT_TRUE(at::equal(va[i].local_shard, vb[i].local_shard))
        << what << ": " << va[i].fqn << " differs (rank " << test::world().rank() << ")";
  }
  auto ba = a.named_buffers(), bb = b.named_buffers();
  ASSERT_EQ(ba.size(), bb.size()) << what;
  for (const auto& item : ba) {
    EXPECT_TRUE(at::equal(item.value(), *bb.find(item.key()))) << what << ": buffer " << item.key();
  }
}

// `place` makes and shards the model on a device; on the CPU it draws eagerly, on the meta device
// it gets storage and exact draws after sharding. The two must hold the same shards and buffers
// (and, given tokens x, compute the same forward), bit for bit.
template <typename Place>
void expect_deferred_equals_eager(const Place& place, const std::string& what, const at::Tensor& x = {}) {
  auto eager = place(at::kCPU);
  auto deferred = place(at::kMeta);
  to_empty(*deferred, at::kCPU);
  init_exact(*deferred, deferred->init_plan(), kSmallChunks);
  expect_same_shards(*eager, *deferred, what);
  if (!x.defined()) return;
  at::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(fsdpp::forward(eager, x), fsdpp::forward(deferred, x))) << what;
}

FullyShardOptions opts(std::shared_ptr<dist::DeviceMesh> mesh,
                       ShardingStrategy s = ShardingStrategy::FULL_SHARD) {
  FullyShardOptions o;
  o.mesh = std::move(mesh);
  o.strategy = s;
  return o;
}

at::Tensor tokens(int64_t vocab, int seed = 3) {
  return torch::randint(0, vocab, {2, 9}, at::make_generator<at::CPUGeneratorImpl>(seed));
}

// A Llama made on `device` (CPU: drawn whole; meta: nothing), sharded one unit per block.
models::Llama sharded_llama(const models::LlamaConfig& cfg, at::Device device,
                            const FullyShardOptions& o) {
  models::Llama m(cfg, device);
  apply_fully_shard(*m, transformer_layer_policy({"TransformerBlock"}), o);
  return m;
}

// The heap bytes this rank's test thread allocates (tests/support/counting_allocator.h): the
// process is the rank, so its thread is counted as rank 0. Declare it before what it measures,
// so that it outlives those tensors.
class CountBytes {
 public:
  CountBytes() { test::tl_rank = 0; }
  ~CountBytes() { test::tl_rank = -1; }
  void reset() { scope_.counter().reset_peak(0); }
  int64_t current() { return scope_.counter().live(0); }
  int64_t peak() { return scope_.counter().peak(0); }

 private:
  test::CountingScope scope_;
};

int64_t shard_bytes(torch::nn::Module& root) {
  int64_t n = 0;
  for (const auto& p : sharded_params(root)) n += p.local_shard.nbytes();
  return n;
}

int64_t buffer_bytes(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& b : m.buffers()) n += b.nbytes();
  return n;
}

}  // namespace

// FSDP over the world (1, 2, 3 or 4 ranks), four strategies: deferred exact = eager, bit for bit,
// in chunks of 1000 bytes and in the default chunks; then the same forward.
TEST(DeferredInit, LlamaFsdpEqualsEagerBitForBit) {
  auto& w = test::world();
  const auto cfg = tiny_llama();
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                 ShardingStrategy::ZERO1, ShardingStrategy::NO_SHARD}) {
    SCOPED_TRACE(to_string(s));
    auto eager = sharded_llama(cfg, at::kCPU, opts(w.mesh(), s));
    for (const InitOptions& io : {kSmallChunks, InitOptions{}}) {
      auto deferred = sharded_llama(cfg, at::kMeta, opts(w.mesh(), s));
      EXPECT_TRUE(has_meta_tensors(*deferred));
      to_empty(*deferred, at::kCPU);
      EXPECT_FALSE(has_meta_tensors(*deferred));
      init_exact(*deferred, deferred->init_plan(), io);
      expect_same_shards(*eager, *deferred, fmt::format("chunk {} B", io.chunk_bytes));
      at::NoGradGuard no_grad;
      auto x = tokens(cfg.vocab_size);
      EXPECT_TRUE(at::equal(fsdpp::forward(eager, x), fsdpp::forward(deferred, x)));
    }
    // init_weights() on a sharded model draws the same, through init_exact.
    auto redrawn = sharded_llama(cfg, at::kMeta, opts(w.mesh(), s));
    to_empty(*redrawn, at::kCPU);
    redrawn->init_weights();
    expect_same_shards(*eager, *redrawn, "init_weights");
  }
}

// The same for Qwen3-MoE: stacked experts (E, I, D) and routers, a dense layer among sparse ones.
TEST(DeferredInit, Qwen3MoeFsdpEqualsEagerBitForBit) {
  auto& w = test::world();
  const auto cfg = tiny_moe();
  auto build = [&](at::Device d) {
    models::Qwen3Moe m(cfg, d);
    apply_fully_shard(*m, transformer_layer_policy({"Qwen3MoeDecoderLayer"}), opts(w.mesh()));
    return m;
  };
  expect_deferred_equals_eager(build, "qwen3_moe", tokens(cfg.vocab_size));
}

// HYBRID_SHARD on a 2 x 2 mesh (4 ranks): replicas hold equal shards, each the eager one.
TEST(DeferredInitLayouts, HybridEqualsEager) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4);
  auto mesh = w.init_device_mesh({2, 2}, {"replicate", "shard"});
  const auto cfg = tiny_llama();
  for (auto s : {ShardingStrategy::HYBRID_SHARD, ShardingStrategy::HYBRID_SHARD_ZERO2}) {
    expect_deferred_equals_eager([&](at::Device d) { return sharded_llama(cfg, d, opts(mesh, s)); }, to_string(s));
  }
}

// Tensor parallelism first (column- and row-wise, the vocabulary-parallel embedding), then FSDP
// over what each rank holds: TP 2 x FSDP 2 and TP 4 (4 ranks), on the meta device throughout.
TEST(DeferredInitLayouts, TensorParallelEqualsEager) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4);
  const auto cfg = tiny_llama();
  for (std::vector<int> shape : {std::vector<int>{2, 2}, std::vector<int>{1, 4}}) {
    SCOPED_TRACE(fmt::format("dp_shard {} x tp {}", shape[0], shape[1]));
    auto mesh = w.init_device_mesh(shape, {"dp_shard", "tp"});
    auto place = [&](at::Device d) {
      models::Llama m(cfg, d);
      auto tp = models::parallelize_llama(*m, mesh->group("tp"));
      auto o = opts(mesh->sub({"dp_shard"}));
      o.outer_layout = tp.outer_layout(*m);
      apply_fully_shard(*m, transformer_layer_policy({"TransformerBlock"}), o);
      return m;
    };
    expect_deferred_equals_eager(place, "tp", tokens(cfg.vocab_size));
  }
}

// Expert parallelism: EP 2 x FSDP 2 of the experts, the rest FSDP over the world (4 ranks).
TEST(DeferredInitLayouts, ExpertParallelEqualsEager) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4);
  const auto cfg = tiny_moe();
  auto mesh = w.init_device_mesh({2, 2}, {"efsdp", "ep"});
  auto place = [&](at::Device d) {
    models::Qwen3Moe m(cfg, d);
    auto ep = models::parallelize_qwen3_moe_experts(*m, {.ep = mesh->group("ep"), .batch = w.group()});
    models::fully_shard_qwen3_moe(*m, ep, opts(w.mesh()), mesh->sub({"efsdp"}));
    return m;
  };
  expect_deferred_equals_eager(place, "ep");
}

// Pipeline stages (pp 2 x dp_shard 2 on 4 ranks): a rank holds its stage's shards only, and draws
// past the stages before it.
TEST(DeferredInitLayouts, PipelineStagesEqualEager) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4);
  const auto cfg = tiny_llama(4);
  auto mesh = w.init_device_mesh({2, 2}, {"pp", "dp_shard"});
  const int stage = mesh->group("pp")->rank();
  auto place = [&](at::Device d, models::Llama& whole) {
    whole = models::Llama(cfg, d);
    auto stages = models::split_llama(whole, models::even_units_per_stage(models::llama_pipeline_units(cfg), 2));
    auto mine = stages[static_cast<size_t>(stage)];
    apply_fully_shard(*mine, transformer_layer_policy({"TransformerBlock"}), opts(mesh->sub({"dp_shard"})));
    return mine;
  };
  models::Llama eager_whole{nullptr}, deferred_whole{nullptr};
  auto eager = place(at::kCPU, eager_whole);
  auto deferred = place(at::kMeta, deferred_whole);
  to_empty(*deferred, at::kCPU);
  init_exact({deferred.ptr().get()}, deferred_whole->init_plan(), kSmallChunks);
  expect_same_shards(*eager, *deferred, fmt::format("stage {}", stage));
}

// Per-shard: the values gathered from N ranks are a one-process model's per-shard values (keyed
// by parameter and element, not by rank), and not the eager ones.
TEST(DeferredInit, PerShardIsIndependentOfTheWorldSize) {
  auto& w = test::world();
  const auto cfg = tiny_llama();
  auto deferred = sharded_llama(cfg, at::kMeta, opts(w.mesh()));
  to_empty(*deferred, at::kCPU);
  init_per_shard(*deferred, deferred->init_plan(), kSmallChunks);
  models::Llama one(cfg, at::kMeta);  // a whole model, one process's
  to_empty(*one, at::kCPU);
  init_per_shard(*one, one->init_plan());
  models::Llama eager(cfg);
  auto whole = one->named_parameters(), drawn = eager->named_parameters();
  int differ = 0;
  for (auto& p : sharded_params(*deferred)) {
    auto full = p.gather(p.local_shard);
    EXPECT_TRUE(at::equal(full, *whole.find(p.fqn))) << p.fqn;
    if (!at::equal(full, *drawn.find(p.fqn))) ++differ;
  }
  EXPECT_GT(differ, 0);
  // Normal(0, std) per matrix, ones for the norms.
  const auto emb = *whole.find("tok_embeddings.weight");
  EXPECT_NEAR(emb.std().item<double>(), cfg.init_std, 0.1 * cfg.init_std);
  EXPECT_NEAR(emb.mean().item<double>(), 0.0, 0.1 * cfg.init_std);
  EXPECT_TRUE(at::equal(*whole.find("norm.weight"), torch::ones({cfg.dim})));
}

// A user's module: blocks moved to meta as they are made, sharded, given storage, and a
// param_init_fn on the local shards (which it sees at their padded shard shape); the padding
// rows stay zero, every rank's rows hold the function's values, and it trains.
TEST(DeferredInit, UserModuleWithParamInitFn) {
  auto& w = test::world();
  struct Net : torch::nn::Module {
    Net() {
      for (int i = 0; i < 3; ++i) {
        auto l = torch::nn::Linear(torch::nn::LinearOptions(10, 13));  // 13 rows: uneven
        to_meta(*l);  // at most one block ever has storage
        layers.push_back(register_module("l" + std::to_string(i), l));
      }
    }
    at::Tensor forward(at::Tensor x) {
      for (auto& l : layers) x = torch::tanh(fsdpp::forward(l, x.narrow(1, 0, 10)));
      return x;
    }
    std::vector<torch::nn::Linear> layers;
  };
  auto net = std::make_shared<Net>();
  EXPECT_TRUE(has_meta_tensors(*net));
  for (auto& l : net->layers) fully_shard(*l, opts(w.mesh()));
  fully_shard(*net, opts(w.mesh()));
  EXPECT_THROW(fully_shard(*net->layers[0], opts(w.mesh())), Error);  // already a unit
  try {  // before storage: a forward names what to call
    at::NoGradGuard no_grad;
    fsdpp::forward(net, torch::ones({2, 10}));
    FAIL() << "expected an error for a unit without storage";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fsdpp::to_empty"), std::string::npos) << e.what();
  }
  EXPECT_THROW(init_shards(*net, [](torch::nn::Module&) {}), Error);  // no storage yet
  to_empty(*net, at::kCPU);
  std::vector<std::vector<int64_t>> seen;
  init_shards(*net, [&](torch::nn::Module& m) {
    for (auto& p : m.parameters(/*recurse=*/false)) {
      seen.push_back(p.sizes().vec());
      p.fill_(0.5);
    }
  });
  const int64_t chunk = (13 + w.size() - 1) / w.size();
  ASSERT_EQ(seen.size(), 6u);  // weight and bias of each Linear
  EXPECT_EQ(seen[0], (std::vector<int64_t>{chunk, 10}));
  EXPECT_EQ(seen[1], (std::vector<int64_t>{chunk}));
  for (auto& p : sharded_params(*net)) {
    const int64_t own = p.own_rows();
    auto rows = p.local_shard.reshape({p.chunk_rows(), -1});
    EXPECT_TRUE(at::equal(rows.narrow(0, 0, own), torch::full_like(rows.narrow(0, 0, own), 0.5))) << p.fqn;
    EXPECT_EQ(rows.narrow(0, own, p.chunk_rows() - own).abs().sum().item<double>(), 0.0) << p.fqn;
    EXPECT_TRUE(at::equal(p.gather(p.local_shard), torch::full(p.global_shape, 0.5))) << p.fqn;
  }
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  auto y = fsdpp::forward(net, torch::ones({2, 10}));
  EXPECT_NEAR(y[0][0].item<double>(), std::tanh(0.5 * 10 * std::tanh(0.5 * 10 * std::tanh(5.5) + 0.5) + 0.5),
              1e-5);
  y.sum().backward();
  opt.step();
}

// The ranks' heap while building, sharding and drawing a model 4 layers deep: at most its shards,
// the buffers and one chunk above where it started; a model built whole needs the whole model.
TEST(DeferredInit, PeakHeapIsTheShardsPlusOneChunk) {
  CountBytes count;
  auto& w = test::world();
  auto cfg = tiny_llama(8);
  cfg.dim = 64;
  cfg.ffn_hidden = 180;
  const InitOptions io{.chunk_bytes = 16 << 10};
  int64_t whole_bytes = 0;
  for (const auto& p : models::Llama(cfg)->parameters()) whole_bytes += p.nbytes();
  count.reset();
  const int64_t start = count.current();
  auto deferred = sharded_llama(cfg, at::kMeta, opts(w.mesh()));
  to_empty(*deferred, at::kCPU);
  init_exact(*deferred, deferred->init_plan(), io);
  const int64_t peak = count.peak() - start;
  const int64_t kept = shard_bytes(*deferred) + buffer_bytes(*deferred);
  EXPECT_LE(peak, kept + 2 * io.chunk_bytes + (64 << 10))
      << "shards " << shard_bytes(*deferred) << ", buffers " << buffer_bytes(*deferred);
  count.reset();
  const int64_t before_eager = count.current();
  auto eager = sharded_llama(cfg, at::kCPU, opts(w.mesh()));
  EXPECT_GE(count.peak() - before_eager, whole_bytes);
  if (w.size() >= 2) EXPECT_LT(peak, whole_bytes * 3 / 4);
  expect_same_shards(*eager, *deferred, "bound test");
}

// A Hugging Face directory read into shards (each rank its rows; wq and wk permuted back from
// rotate-half) equals the same directory loaded whole, then sharded; within shards + chunks.
TEST(DeferredInit, HfRowsEqualWholeLoad) {
  CountBytes count;
  auto& w = test::world();
  const auto cfg = tiny_llama();
  const auto dir = test::scratch_dir("fsdpp_deferred", "hf_llama");
  if (w.rank() == 0) {
    auto c = cfg;
    c.seed = 99;
    models::Llama src(c);
    models::NamedTensors t;
    for (const auto& p : src->named_parameters()) t.emplace_back(p.key(), p.value());
    models::save_hf_llama(dir, cfg, t);
  }
  w.group()->barrier();
  auto whole = models::Llama(cfg);
  models::load_named_tensors(*whole, models::load_hf_llama(dir).tensors);
  apply_fully_shard(*whole, transformer_layer_policy({"TransformerBlock"}), opts(w.mesh()));
  auto rows = sharded_llama(cfg, at::kMeta, opts(w.mesh()));
  to_empty(*rows, at::kCPU);
  const InitOptions io{.chunk_bytes = 2000};
  count.reset();
  const int64_t start = count.current();
  models::load_hf_llama_rows(dir, cfg, {rows.ptr().get()}, io);
  // wq's chunks read whole heads (8 rows of 32 here) on both sides of the chunk: three copies.
  EXPECT_LE(count.peak() - start, 4 * io.chunk_bytes + 4 * 8 * 32 * 4);
  expect_same_shards(*whole, *rows, "hf rows");
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(dir.parent_path());
}

// Qwen3-MoE's Hugging Face layout (one tensor per expert) into EP 2 x FSDP 2 shards.
TEST(DeferredInitLayouts, Qwen3MoeHfRowsIntoExpertShards) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4);
  auto cfg = tiny_moe();
  const auto dir = test::scratch_dir("fsdpp_deferred", "hf_moe");
  if (w.rank() == 0) {
    auto c = cfg;
    c.seed = 77;
    models::Qwen3Moe src(c);
    models::NamedTensors t;
    for (const auto& p : src->named_parameters()) t.emplace_back(p.key(), p.value());
    models::save_hf_qwen3_moe(dir, cfg, t);
  }
  w.group()->barrier();
  auto mesh = w.init_device_mesh({2, 2}, {"efsdp", "ep"});
  auto place = [&](at::Device d) {
    models::Qwen3Moe m(cfg, d);
    auto ep = models::parallelize_qwen3_moe_experts(*m, {.ep = mesh->group("ep"), .batch = w.group()});
    models::fully_shard_qwen3_moe(*m, ep, opts(w.mesh()), mesh->sub({"efsdp"}));
    return m;
  };
  models::Qwen3Moe whole(cfg);
  models::load_named_tensors(*whole, models::load_hf_qwen3_moe(dir).tensors);
  auto ep = models::parallelize_qwen3_moe_experts(*whole, {.ep = mesh->group("ep"), .batch = w.group()});
  models::fully_shard_qwen3_moe(*whole, ep, opts(w.mesh()), mesh->sub({"efsdp"}));
  auto rows = place(at::kMeta);
  to_empty(*rows, at::kCPU);
  models::load_hf_qwen3_moe_rows(dir, cfg, {rows.ptr().get()}, kSmallChunks);
  expect_same_shards(*whole, *rows, "hf experts");
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(dir.parent_path());
}

// An fsdpp FULL checkpoint loads into a deferred model (each rank its rows) as into an eager one,
// holding on the heap its shards plus one shard-sized copy of a parameter at a time.
TEST(DeferredInit, CheckpointLoadsIntoShards) {
  CountBytes count;
  auto& w = test::world();
  const auto cfg = tiny_llama(6);
  const auto dir = test::scratch_dir("fsdpp_deferred", "full");
  auto src = sharded_llama([&] { auto c = cfg; c.seed = 3; return c; }(), at::kCPU, opts(w.mesh()));
  state::LoadOptions lo;
  lo.skip_buffer = [](const std::string& n) { return models::is_non_persistent_buffer(n); };
  state::save_state_dict(dir, *src, nullptr, w.group(),
                         {.type = state::StateDictType::FULL, .skip_buffer = lo.skip_buffer});
  auto dst = sharded_llama(cfg, at::kMeta, opts(w.mesh()));
  to_empty(*dst, at::kCPU);
  int64_t largest_shard = 0;
  for (const auto& p : sharded_params(*dst)) largest_shard = std::max<int64_t>(largest_shard, p.local_shard.nbytes());
  count.reset();
  const int64_t start = count.current();
  state::load_state_dict(dir, *dst, nullptr, w.group(), lo);
  EXPECT_LE(count.peak() - start, 2 * largest_shard + (256 << 10));
  expect_same_shards(*src, *dst, "FULL checkpoint");
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(dir.parent_path());
}

// What is refused, by name.
TEST(DeferredInit, ErrorsNameWhatIsWrong) {
  auto& w = test::world();
  const auto cfg = tiny_llama(1);
  auto m = sharded_llama(cfg, at::kMeta, opts(w.mesh()));
  EXPECT_THROW(to_empty(*m, at::kMeta), ConfigError);
  to_empty(*m, at::kCPU);
  InitPlan plan = m->init_plan();
  plan.params.pop_back();  // output.weight
  try {
    init_exact(*m, plan);
    FAIL() << "expected an error for a parameter the plan lacks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'output.weight'"), std::string::npos) << e.what();
  }
  plan = m->init_plan();
  plan.params[0].shape = {1, 2};
  EXPECT_THROW(init_exact(*m, plan), Error);
  EXPECT_THROW(to_meta(*m), Error);  // already holds units
}

// A model that cannot be built whole within a budget of three quarters of it trains within it: 40
// blocks of dim 256 (32 M parameters, 129 MB in fp32). Built whole, a rank's heap holds at least
// the whole model at once; made on the meta device, sharded over 4 ranks and drawn, it takes SGD
// steps holding its shards, gradient shards and a unit's gathers and reduction (about 80 MB),
// counted by the allocator hook. The hard limit (RLIMIT_DATA, which the kernel enforces) is
// train.deferred_init's and make bench-big-model's: fsdpp-train under prlimit --data.
TEST(DeferredInitLayouts, TooBigToBuildWholeTrainsWithinThreeQuartersOfIt) {
  CountBytes count;
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4);
  models::LlamaConfig cfg;
  cfg.vocab_size = 256;
  cfg.dim = 256;
  cfg.n_layers = 40;
  cfg.n_heads = 8;
  cfg.ffn_hidden = 704;
  cfg.max_seq_len = 16;
  int64_t whole = 0;
  const models::Llama shapes(cfg, at::kMeta);
  for (const auto& p : shapes->init_plan().params) {
    int64_t n = 4;
    for (auto d : p.shape) n *= d;
    whole += n;
  }
  ASSERT_GT(whole, 125'000'000);
  count.reset();
  int64_t start = count.current();
  { models::Llama built(cfg); }
  const int64_t built_peak = count.peak() - start;
  EXPECT_GE(built_peak, whole);
  count.reset();
  start = count.current();
  auto m = sharded_llama(cfg, at::kMeta, opts(w.mesh()));
  to_empty(*m, at::kCPU);
  init_exact(*m, m->init_plan());
  torch::optim::SGD opt(m->parameters(), torch::optim::SGDOptions(0.01));
  const auto x = tokens(cfg.vocab_size);
  double first = 0, last = 0;
  for (int step = 0; step < 3; ++step) {
    auto out = fsdpp::forward(m, x.narrow(1, 0, 8), x.narrow(1, 1, 8));
    out.loss.backward();
    opt.step();
    opt.zero_grad();
    (step == 0 ? first : last) = out.loss.item<double>();
  }
  EXPECT_LT(last, first);
  const int64_t trained_peak = count.peak() - start;
  EXPECT_LT(trained_peak, whole * 3 / 4);
  if (w.rank() == 0) {
    std::printf("[deferred] whole model %.1f MB: built whole, %.1f MB of heap at the peak; made on meta, "
                "sharded over 4 ranks, drawn and 3 SGD steps: %.1f MB (budget %.1f MB)\n",
                whole / 1e6, built_peak / 1e6, trained_peak / 1e6, whole * 0.75 / 1e6);
  }
}
