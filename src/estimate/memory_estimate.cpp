#include "fsdpp/estimate/memory_estimate.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/optim/optimizer_state.h"

namespace fsdpp {
namespace {

// What holds a tensor of the ledger. Gradient shards are apart from the other gradient buffers
// because CPU offload moves them to the host.
enum Cat { kParams, kGradWork, kGradShards, kOptim, kUnsharded, kActs, kNumCats };

// glibc's malloc (malloc/malloc.c) reduced to what decides the resident memory of tensor-sized
// blocks on a CPU run:
// - a request at or above the mmap threshold gets a mapping of its own, unmapped when freed;
//   unless the threshold was set (MALLOC_MMAP_THRESHOLD_), freeing a mapping raises it to the
//   mapping's size (up to 32 MiB), so after the first few frees nearly every tensor comes from
//   the heap;
// - a smaller request takes the best-fitting free chunk (the rest of it stays free), or else the
//   top of the heap, which grows it;
// - freed tensor chunks stay apart: the small objects allocated with every tensor (its
//   TensorImpl and storage, autograd nodes and saved-variable records) are carved from the same
//   heap between the data chunks and live in per-thread caches and fast bins that glibc never
//   coalesces, and the long-lived ones made during the step keep the heap from shrinking.
// Pages below the heap's top stay resident after their chunks are freed, so the heap's high
// water, not the live bytes, is what RSS shows. With the threshold fixed low, few tensors use the
// heap and this is close to exact; with glibc's dynamic threshold real fragmentation exceeds this
// model's (docs/estimate.md gives the measured gap), so it is a lower bound there.
class HeapModel {
 public:
  static constexpr int64_t kInitialThreshold = 128 << 10;  // DEFAULT_MMAP_THRESHOLD_MIN
  static constexpr int64_t kMaxThreshold = 32 << 20;       // DEFAULT_MMAP_THRESHOLD_MAX (64-bit)
  static constexpr int64_t kPage = 4096;

  // `fixed`: the threshold was set (M_MMAP_THRESHOLD), which turns its adjustment off.
  HeapModel(int64_t threshold, bool fixed) : threshold_(threshold), fixed_(fixed) {}

  void alloc(int id, int64_t bytes) {
    if (static_cast<size_t>(id) >= where_.size()) where_.resize(id + 1, {0, 0});
    if (bytes >= threshold_) {
      const int64_t n = round_up(bytes + 64, kPage);
      mapped_ += n;
      where_[id] = {-1, n};
      note();
      return;
    }
    const int64_t n = round_up(bytes + 64, 64);  // chunk header and 64-byte alignment
    auto fit = holes_.lower_bound(n);
    if (fit != holes_.end()) {
      const int64_t size = *fit;
      holes_.erase(fit);
      if (size > n) holes_.insert(size - n);
      where_[id] = {0, n};
      return;
    }
    top_ += n;
    where_[id] = {0, n};
    note();
  }

  void free(int id) {
    const auto [kind, n] = where_[id];
    if (n == 0) return;
    where_[id] = {0, 0};
    if (kind < 0) {
      mapped_ -= n;
      if (!fixed_ && n > threshold_ && n <= kMaxThreshold) threshold_ = n;
      return;
    }
    holes_.insert(n);
  }

  int64_t resident_peak() const { return peak_; }

 private:
  static int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
  void note() { peak_ = std::max(peak_, top_ + mapped_); }

  int64_t threshold_;
  bool fixed_;
  int64_t top_ = 0;  // the heap's size: it only grows
  int64_t mapped_ = 0;
  int64_t peak_ = 0;
  std::multiset<int64_t> holes_;                     // sizes of the free chunks in the heap
  std::vector<std::pair<int64_t, int64_t>> where_;  // id -> (-1 if mapped, else 0; size)
};

// Every tensor the steps allocate and free, in order; the high-water mark of live bytes and
// what made it up, and (on the CPU) the heap's resident high water.
class Ledger {
 public:
  using Id = int;
  Ledger(std::array<bool, kNumCats> on_device, HeapModel* heap) : on_device_(on_device), heap_(heap) {}

  Id alloc(Cat c, int64_t bytes) {
    const Id id = static_cast<Id>(sizes_.size());
    sizes_.push_back(bytes);
    cats_.push_back(c);
    live_.push_back(true);
    cur_[c] += bytes;
    if (on_device_[c]) {
      device_ += bytes;
      if (heap_) heap_->alloc(id, bytes);
      if (device_ > peak_) {
        peak_ = device_;
        at_peak_ = cur_;
        peak_where_ = where_;
      }
    } else {
      host_ += bytes;
      host_peak_ = std::max(host_peak_, host_);
    }
    return id;
  }
  void free(Id id) {
    if (id < 0 || !live_[id]) return;
    live_[id] = false;
    cur_[cats_[id]] -= sizes_[id];
    if (on_device_[cats_[id]]) {
      device_ -= sizes_[id];
      if (heap_) heap_->free(id);
    } else {
      host_ -= sizes_[id];
    }
  }
  // A temporary: the peak sees it, nothing keeps it.
  void touch(Cat c, int64_t bytes) { free(alloc(c, bytes)); }
  void at(std::string where) { where_ = std::move(where); }

  int64_t peak() const { return peak_; }
  int64_t resident_peak() const { return heap_ ? heap_->resident_peak() : peak_; }
  int64_t host_peak() const { return host_peak_; }
  const std::array<int64_t, kNumCats>& at_peak() const { return at_peak_; }
  const std::string& peak_where() const { return peak_where_; }

 private:
  std::array<bool, kNumCats> on_device_;
  HeapModel* heap_;
  std::vector<int64_t> sizes_;
  std::vector<Cat> cats_;
  std::vector<bool> live_;
  std::array<int64_t, kNumCats> cur_{};
  std::array<int64_t, kNumCats> at_peak_{};
  int64_t device_ = 0, host_ = 0, peak_ = 0, host_peak_ = 0;
  std::string where_ = "start", peak_where_ = "start";
};

using Id = Ledger::Id;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// This rank's padded shard: every parameter split along dim 0 into shard_world chunks of
// ceil(rows / shard_world) rows.
int64_t shard_numel(const ModelDescription::Unit& u, int shard_world) {
  int64_t n = 0;
  for (const auto& p : u.params) n += ceil_div(p.rows, shard_world) * p.row_numel;
  return n;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The optimizer as the optimizer-state adapter knows it, with what decides its state tensors.
struct EstimatedOptimizer {
  optim::OptimizerKind kind;
  optim::StateConfig config;
};
EstimatedOptimizer adapter_view(EstimateOptimizer o) {
  switch (o) {
    case EstimateOptimizer::ADAMW: return {optim::OptimizerKind::ADAMW, {}};
    case EstimateOptimizer::ADAM: return {optim::OptimizerKind::ADAM, {}};
    case EstimateOptimizer::SGD: return {optim::OptimizerKind::SGD, {}};
    case EstimateOptimizer::SGD_MOMENTUM: return {optim::OptimizerKind::SGD, {.momentum = true}};
  }
  return {optim::OptimizerKind::ADAMW, {}};
}

// The saved tensors of one TransformerBlock (forward of src/models/llama.cpp, as autograd keeps
// them) and the ones that are freed before the block ends. Sizes in bytes.
struct Dims {
  int64_t BT, B, T, C, Q, K, F, V, H, rep;
  int64_t e;  // activation (compute) element bytes: param_dtype
  bool mp;    // e < 4: RMSNorm and rotary maths run in an fp32 copy
};

struct BlockSaved {
  std::vector<Id> attn;  // freed as the attention half's backward runs
  std::vector<Id> ffn;   // freed as the feed-forward half's backward runs
  Id x = -1;             // the block's input (saved by attention_norm)
  Id h = -1;             // the residual after attention (saved by ffn_norm)
  Id out = -1;           // the block's output: the next block's x
};

// RMSNorm of an input that is already in the ledger: pow's temporary, rsqrt (saved), the
// normalised fp32 tensor (saved by the multiply with weight) and the output (saved by the next
// linear); with mixed precision the fp32 copy of the input is saved too.
void norm_forward(Ledger& l, const Dims& d, std::vector<Id>& saved) {
  const int64_t f = 4;
  if (d.mp) saved.push_back(l.alloc(kActs, f * d.BT * d.C));  // xc = x.to(float)
  l.touch(kActs, f * d.BT * d.C);                              // xc.pow(2)
  saved.push_back(l.alloc(kActs, f * d.BT));                   // rsqrt(mean + eps)
  if (d.mp) l.touch(kActs, f * d.BT * d.C);                    // normed in fp32, then cast
  saved.push_back(l.alloc(kActs, d.e * d.BT * d.C));           // normed
  saved.push_back(l.alloc(kActs, d.e * d.BT * d.C));           // normed * weight
}

// Rotary embedding of x (BT x width): four half-size products, their difference and sum, the
// stacked result; the input itself is not saved (the multiplies save cos and sin).
Id rope_forward(Ledger& l, const Dims& d, Id x, int64_t width) {
  const int64_t f = 4, half = f * d.BT * width / 2;
  Id xc = d.mp ? l.alloc(kActs, f * d.BT * width) : -1;
  Id p1 = l.alloc(kActs, half), p2 = l.alloc(kActs, half), dd = l.alloc(kActs, half);
  l.free(p1);
  l.free(p2);
  Id p3 = l.alloc(kActs, half), p4 = l.alloc(kActs, half), ee = l.alloc(kActs, half);
  l.free(p3);
  l.free(p4);
  Id st = l.alloc(kActs, f * d.BT * width);
  l.free(dd);
  l.free(ee);
  Id out = st;
  if (d.mp) {
    out = l.alloc(kActs, d.e * d.BT * width);
    l.free(st);
    l.free(xc);
  }
  l.free(x);
  return out;
}

BlockSaved block_forward(Ledger& l, const Dims& d, Id x) {
  BlockSaved s;
  s.x = x;
  norm_forward(l, d, s.attn);
  Id q = l.alloc(kActs, d.e * d.BT * d.Q);
  Id k = l.alloc(kActs, d.e * d.BT * d.K);
  Id v = l.alloc(kActs, d.e * d.BT * d.K);
  Id rq = rope_forward(l, d, q, d.Q);
  Id rk = rope_forward(l, d, k, d.K);
  Id kk = rk, vv = v;
  if (d.rep > 1) {  // repeat_kv: expand + reshape copies the kv heads
    kk = l.alloc(kActs, d.e * d.BT * d.Q);
    l.free(rk);
    vv = l.alloc(kActs, d.e * d.BT * d.Q);
    l.free(v);
  }
  Id y = l.alloc(kActs, d.e * d.BT * d.Q);        // SDPA output (saved by SDPA and wo)
  Id lse = l.alloc(kActs, 4 * d.B * d.H * d.T);  // SDPA's logsumexp
  s.attn.insert(s.attn.end(), {rq, kk, vv, y, lse});
  Id o = l.alloc(kActs, d.e * d.BT * d.C);
  s.h = l.alloc(kActs, d.e * d.BT * d.C);  // h = x + attention(...)
  l.free(o);
  norm_forward(l, d, s.ffn);
  for (int i = 0; i < 4; ++i) s.ffn.push_back(l.alloc(kActs, d.e * d.BT * d.F));  // w1 x, silu, w3 x, product
  Id f = l.alloc(kActs, d.e * d.BT * d.C);
  s.out = l.alloc(kActs, d.e * d.BT * d.C);
  l.free(f);
  return s;
}

// RMSNorm's backward: the gradients of normed, of the input through the multiply, and of the
// input through mean and pow are alive together with the incoming gradient (4 x BT x C at most);
// leaves the input's gradient.
Id norm_backward(Ledger& l, const Dims& d, Id grad_in) {
  const int64_t f = 4;
  Id t = l.alloc(kActs, 3 * f * d.BT * d.C);
  Id g = l.alloc(kActs, d.e * d.BT * d.C);
  l.free(t);
  l.free(grad_in);
  return g;
}

// Gradients of one block's parameters appear one by one in backward (the unsharded gradients).
struct GradAlloc {
  Ledger* l;
  int64_t bytes_per_elem;
  std::vector<Id>* ids;
  void operator()(int64_t numel) const { ids->push_back(l->alloc(kGradWork, numel * bytes_per_elem)); }
};

// Backward of one block from the gradient of its output; returns the gradient of its input.
Id block_backward(Ledger& l, const Dims& d, BlockSaved& s, Id g, const GradAlloc& grad) {
  auto free_all = [&](std::vector<Id>& ids) {
    for (Id id : ids) l.free(id);
    ids.clear();
  };
  const std::vector<Id> ffn = s.ffn;  // [xc?] r normed n | a silu b m
  const size_t nf = ffn.size();
  const Id a = ffn[nf - 4], si = ffn[nf - 3], b = ffn[nf - 2], m = ffn[nf - 1];
  // w2: grad of the product; then the product's backward: grads of silu(a) and of b.
  Id gm = l.alloc(kActs, d.e * d.BT * d.F);
  grad(d.C * d.F);
  l.free(m);
  Id gs = l.alloc(kActs, d.e * d.BT * d.F), gb = l.alloc(kActs, d.e * d.BT * d.F);
  l.free(si);
  l.free(b);
  l.free(gm);
  Id gn = l.alloc(kActs, d.e * d.BT * d.C);  // w3's input gradient
  grad(d.C * d.F);
  l.free(gb);
  Id ga = l.alloc(kActs, d.e * d.BT * d.F);  // silu backward
  l.free(a);
  l.free(gs);
  l.touch(kActs, d.e * d.BT * d.C);  // w1's input gradient, added into gn
  grad(d.C * d.F);
  l.free(ga);
  free_all(s.ffn);
  Id gh = norm_backward(l, d, gn);
  grad(d.C);
  l.free(s.h);
  Id ghh = l.alloc(kActs, d.e * d.BT * d.C);  // residual: g + norm's gradient
  l.free(gh);
  l.free(g);
  // Attention: wo, SDPA (grads of q, k, v at full head count), repeat_kv, rotary, projections.
  Id gy = l.alloc(kActs, d.e * d.BT * d.Q);
  grad(d.Q * d.C);
  Id gq = l.alloc(kActs, d.e * d.BT * d.Q), gk = l.alloc(kActs, d.e * d.BT * d.Q),
     gv = l.alloc(kActs, d.e * d.BT * d.Q);
  const std::vector<Id> attn = s.attn;
  const size_t na = attn.size();
  for (size_t i = na - 5; i < na; ++i) l.free(attn[i]);  // rq kk vv y lse
  l.free(gy);
  if (d.rep > 1) {
    Id k2 = l.alloc(kActs, d.e * d.BT * d.K);
    l.free(gk);
    gk = k2;
    Id v2 = l.alloc(kActs, d.e * d.BT * d.K);
    l.free(gv);
    gv = v2;
  }
  // Rotary backward: select/stack backward materialise full-size gradients (3 x width at most).
  l.touch(kActs, 3 * 4 * d.BT * d.Q);
  l.touch(kActs, 3 * 4 * d.BT * d.K);
  Id gn1 = l.alloc(kActs, d.e * d.BT * d.C);
  grad(d.C * d.Q);
  l.free(gq);
  l.touch(kActs, d.e * d.BT * d.C);
  grad(d.C * d.K);
  l.free(gk);
  l.touch(kActs, d.e * d.BT * d.C);
  grad(d.C * d.K);
  l.free(gv);
  Id gx1 = norm_backward(l, d, gn1);
  grad(d.C);
  free_all(s.attn);
  l.free(s.x);
  Id gx = l.alloc(kActs, d.e * d.BT * d.C);
  l.free(gx1);
  l.free(ghh);
  return gx;
}

struct UnitState {
  int64_t numel = 0;        // unsharded elements
  int64_t shard = 0;        // this rank's padded elements
  Id unsharded = -1;        // gathered parameters
  std::vector<Id> grads;    // unsharded gradients accumulating in backward
  Id grad_shard = -1;       // reduced gradient shard (until zero_grad)
  std::vector<Id> in_flight;  // reduce-scatter input and ring buffers while the collective runs
};

}  // namespace

int64_t dtype_bytes(EstimateDType t) { return t == EstimateDType::FP32 ? 4 : 2; }

const char* to_string(EstimateDType t) {
  switch (t) {
    case EstimateDType::FP32: return "fp32";
    case EstimateDType::BF16: return "bf16";
    case EstimateDType::FP16: return "fp16";
  }
  return "?";
}

EstimateDType parse_estimate_dtype(const std::string& name) {
  const std::string n = lower(name);
  if (n == "fp32" || n == "float32" || n == "float" || n == "f32") return EstimateDType::FP32;
  if (n == "bf16" || n == "bfloat16") return EstimateDType::BF16;
  if (n == "fp16" || n == "float16" || n == "half" || n == "f16") return EstimateDType::FP16;
  FSDPP_THROW(ConfigError, "[estimate] dtype '{}' is not known; expected fp32, bf16 or fp16", name);
}

EstimateOptimizer parse_estimate_optimizer(const std::string& name) {
  const std::string n = lower(name);
  if (n == "adamw") return EstimateOptimizer::ADAMW;
  if (n == "adam") return EstimateOptimizer::ADAM;
  if (n == "sgd") return EstimateOptimizer::SGD;
  if (n == "sgd_momentum" || n == "sgd-momentum") return EstimateOptimizer::SGD_MOMENTUM;
  FSDPP_THROW(ConfigError, "[estimate] optimizer '{}' is not known; expected adamw, adam, sgd or sgd_momentum",
              name);
}

void DecoderShape::validate() const {
  auto positive = [](const char* field, int64_t v) {
    FSDPP_CHECK_AS(ConfigError, v > 0, "[estimate] {}={} is not positive", field, v);
  };
  positive("vocab_size", vocab_size);
  positive("dim", dim);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("ffn_hidden", ffn_hidden);
  FSDPP_CHECK_AS(ConfigError, dim % n_heads == 0, "[estimate] dim={} is not divisible by n_heads={}", dim,
                 n_heads);
  FSDPP_CHECK_AS(ConfigError, n_heads % n_kv_heads == 0,
                 "[estimate] n_kv_heads={} does not divide n_heads={}", n_kv_heads, n_heads);
}

int64_t ModelDescription::Unit::numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t ModelDescription::num_params() const {
  int64_t n = 0;
  for (const auto& u : units) n += u.numel();
  return n;
}

ModelDescription describe_decoder(const DecoderShape& s) {
  s.validate();
  ModelDescription m;
  m.shape = s;
  const int64_t C = s.dim, kv = s.n_kv_heads * s.head_dim(), q = s.n_heads * s.head_dim();
  ModelDescription::Unit root{"(root)", {{s.vocab_size, C}, {C, 1}}};
  if (!s.tie_embeddings) root.params.push_back({s.vocab_size, C});
  m.units.push_back(root);
  for (int64_t i = 0; i < s.n_layers; ++i) {
    // attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3 (Linear weights are (out, in)).
    m.units.push_back({"layers." + std::to_string(i),
                       {{C, 1}, {q, C}, {kv, C}, {kv, C}, {C, q}, {C, 1}, {s.ffn_hidden, C},
                        {C, s.ffn_hidden}, {s.ffn_hidden, C}}});
  }
  return m;
}

ModelDescription describe_parameter_count(int64_t num_params, int64_t n_units) {
  FSDPP_CHECK_AS(ConfigError, num_params > 0, "[estimate] the parameter count {} is not positive", num_params);
  FSDPP_CHECK_AS(ConfigError, n_units > 0, "[estimate] the number of units {} is not positive", n_units);
  ModelDescription m;
  const int64_t per = num_params / n_units;
  m.units.push_back({"(root)", {{num_params - per * (n_units - 1), 1}}});
  for (int64_t i = 1; i < n_units; ++i) m.units.push_back({"unit." + std::to_string(i), {{per, 1}}});
  return m;
}

MemoryEstimate estimate_memory(const ModelDescription& model, const EstimateOptions& o) {
  FSDPP_CHECK_AS(ConfigError, !model.units.empty(), "[estimate] the model has no units");
  FSDPP_CHECK_AS(ConfigError, o.world_size >= 1, "[estimate] world size {} is not positive", o.world_size);
  FSDPP_CHECK_AS(ConfigError, o.batch >= 1 && o.seq_len >= 1,
                 "[estimate] batch={} and seq_len={} must be positive", o.batch, o.seq_len);
  FSDPP_CHECK_AS(ConfigError, o.forward_prefetch >= 0 && o.backward_prefetch >= 0,
                 "[estimate] forward_prefetch={} and backward_prefetch={} must be >= 0", o.forward_prefetch,
                 o.backward_prefetch);
  const ShardingStrategy s = o.strategy;
  const StrategyTraits& traits = traits_of(s);
  int shard_world = o.world_size;
  if (!traits.shards) shard_world = 1;
  if (traits.hybrid) {
    shard_world = o.shard_group_size > 0 ? o.shard_group_size : std::min(o.world_size, 8);
    FSDPP_CHECK_AS(ConfigError, o.world_size % shard_world == 0,
                   "[estimate] {} over {} ranks: shard groups of {} ranks do not divide the world",
                   to_string(s), o.world_size, shard_world);
  }
  const bool reshard_after_forward = traits.reshard_after_forward;
  const bool keep_unsharded = traits.keep_unsharded_between_steps;
  // ZERO1 shards the optimizer state (and, as fsdpp implements it, the gradients) but keeps every
  // parameter gathered.
  const bool gather = shard_world > 1;
  const int64_t pb = dtype_bytes(o.param_dtype), rb = dtype_bytes(o.reduce_dtype), f32 = 4;
  const bool mp = o.param_dtype != EstimateDType::FP32;
  const bool offload = o.cpu_offload && o.device_is_gpu;
  std::array<bool, kNumCats> on_device{};
  on_device.fill(true);
  if (offload) on_device[kParams] = on_device[kGradShards] = on_device[kOptim] = false;

  MemoryEstimate e;
  e.shard_world = shard_world;
  // fp32 state tensors per parameter (the ones its first step creates), and whether the step is
  // Adam's, with its two temporaries.
  const auto optimizer = adapter_view(o.optimizer);
  const auto optim_states =
      static_cast<int64_t>(optim::created_state_names(optimizer.kind, optimizer.config).size());
  const int64_t optim_per_elem = optim_states * 4;
  const bool adam_step =
      optimizer.kind == optim::OptimizerKind::ADAMW || optimizer.kind == optim::OptimizerKind::ADAM;
  std::vector<UnitState> us(model.units.size());
  // Parameter shards in the optimizer's order (module registration: the embedding, the blocks,
  // then the final norm and the output layer), element counts.
  std::vector<int64_t> param_shards;
  for (size_t i = 0; i < model.units.size(); ++i) {
    const auto& u = model.units[i];
    us[i].numel = u.numel();
    us[i].shard = gather ? shard_numel(u, shard_world) : us[i].numel;
  }
  auto shard_of = [&](const ModelDescription::Param& p) {
    return gather ? ceil_div(p.rows, shard_world) * p.row_numel : p.numel();
  };
  const auto& root_params = model.units[0].params;
  if (!root_params.empty()) param_shards.push_back(shard_of(root_params[0]));
  for (size_t i = 1; i < model.units.size(); ++i)
    for (const auto& p : model.units[i].params) param_shards.push_back(shard_of(p));
  for (size_t k = 1; k < root_params.size(); ++k) param_shards.push_back(shard_of(root_params[k]));
  const double psi = static_cast<double>(model.num_params());
  e.model_states = static_cast<int64_t>(
      !traits.shards  ? psi * (f32 + f32 + optim_per_elem)
      : keep_unsharded ? psi * f32 + psi * (f32 + optim_per_elem) / o.world_size
                                      : psi * (f32 + f32 + optim_per_elem) / shard_world);

  // On the CPU every tensor comes from glibc's malloc (see HeapModel).
  std::optional<HeapModel> heap;
  if (!o.device_is_gpu) {
    if (o.mmap_threshold > 0) {
      heap.emplace(o.mmap_threshold, /*fixed=*/true);
    } else {
      heap.emplace(HeapModel::kInitialThreshold, /*fixed=*/false);
    }
  }
  Ledger l(on_device, heap ? &*heap : nullptr);

  // ---- building the model: every rank builds it whole (each parameter allocated, then redrawn
  // from the seed through a temporary of its size), then fully_shard, unit by unit from the
  // innermost, copies the rank's rows into the unit's flat shard and frees the full tensors ------
  l.at("building the model");
  {
    std::vector<std::vector<Id>> full(us.size());
    auto build = [&](size_t unit, const ModelDescription::Param& p) {
      full[unit].push_back(l.alloc(kParams, p.numel() * f32));
    };
    std::vector<std::pair<size_t, const ModelDescription::Param*>> order;  // registration order
    if (!root_params.empty()) order.emplace_back(0, &root_params[0]);
    for (size_t i = 1; i < model.units.size(); ++i)
      for (const auto& p : model.units[i].params) order.emplace_back(i, &p);
    for (size_t k = 1; k < root_params.size(); ++k) order.emplace_back(0, &root_params[k]);
    for (const auto& [unit, p] : order) build(unit, *p);
    for (const auto& [unit, p] : order) {
      if (p->row_numel > 1 || model.shape == std::nullopt) l.touch(kParams, p->numel() * f32);  // init draw
    }
    for (size_t k = 1; k <= us.size(); ++k) {
      const size_t i = k % us.size();  // the blocks, then the root
      l.alloc(kParams, us[i].shard * f32);  // the flat shard, kept
      for (Id id : full[i]) l.free(id);
    }
  }

  // ---- before the first step: buffers ---------------------------------------------------------
  l.at("start of the step");
  // Buffers: every attention layer's rotary cos and sin tables, (max_seq_len, head_dim / 2) fp32.
  if (model.shape) {
    const auto& sh = *model.shape;
    const int64_t rows = sh.max_seq_len > 0 ? sh.max_seq_len : o.seq_len;
    for (int64_t i = 0; i < 2 * sh.n_layers; ++i) l.alloc(kParams, rows * (sh.head_dim() / 2) * f32);
  }
  // Mixed precision without sharding: the low-precision copy of the parameters compute uses.
  if (mp && !gather) l.alloc(kUnsharded, model.num_params() * pb);
  std::vector<Id> optim_state;  // created by the first optimizer step

  // A gather in flight holds its (shard_world x shard) output, and with mixed precision the
  // shard converted to param_dtype (the all-gather input), until the unit copies it out.
  std::vector<std::pair<Id, Id>> pending(us.size(), {-1, -1});
  int in_flight = 0;
  // ZERO1 keeps its gathered parameters and refreshes them once per step, in forward.
  std::vector<bool> refreshed(us.size(), false);
  auto needs_gather = [&](size_t i) {
    return gather && (keep_unsharded ? !refreshed[i] : us[i].unsharded < 0);
  };
  auto start_gather = [&](size_t i) {
    if (pending[i].first >= 0) return;
    // The all-gather input: the shard converted to param_dtype, or copied from the host.
    Id cast = mp || offload ? l.alloc(kUnsharded, us[i].shard * pb) : -1;
    pending[i] = {l.alloc(kUnsharded, static_cast<int64_t>(shard_world) * us[i].shard * pb), cast};
    ++in_flight;
  };
  auto unshard = [&](size_t i) {
    auto& u = us[i];
    if (!needs_gather(i)) return;
    start_gather(i);
    refreshed[i] = true;
    if (u.unsharded < 0) u.unsharded = l.alloc(kUnsharded, u.numel * pb);  // rows copied out
    l.free(pending[i].first);
    l.free(pending[i].second);
    pending[i] = {-1, -1};
    --in_flight;
  };
  std::vector<size_t> forward_order, backward_order;
  for (size_t i = 0; i < us.size(); ++i) forward_order.push_back(i);
  backward_order.push_back(0);  // the root's outputs (logits, loss) get their gradients first
  for (size_t i = us.size() - 1; i >= 1; --i) backward_order.push_back(i);
  auto reshard = [&](size_t i) {
    if (keep_unsharded) return;
    l.free(us[i].unsharded);
    us[i].unsharded = -1;
  };
  int last_reduced = -1;
  auto reduce = [&](size_t i) {
    auto& u = us[i];
    // The previous unit's reduce-scatter has finished by now (the next one queues behind it).
    if (last_reduced >= 0) {
      for (Id id : us[last_reduced].in_flight) l.free(id);
      us[last_reduced].in_flight.clear();
    }
    // (shard_world, shard) input: zeros, then each gradient copied into its rows. Without
    // sharding it is all-reduced in place (replicas) or used as is (one rank): it becomes the
    // gradient the optimizer reads.
    Id input = l.alloc(gather ? kGradWork : kGradShards, static_cast<int64_t>(shard_world) * u.shard * rb);
    for (Id g : u.grads) l.free(g);
    u.grads.clear();
    if (gather) {
      if (offload) l.touch(kGradWork, u.shard * rb);  // reduced on the device, then copied out
      u.grad_shard = l.alloc(kGradShards, u.shard * rb);
      // The ring's send and receive buffers (one chunk each) live as long as the input.
      u.in_flight = {input, l.alloc(kGradWork, 2 * u.shard * rb)};
      if (rb != f32) {  // the reduced shard goes back to fp32 for the optimizer
        Id up = l.alloc(kGradShards, u.shard * f32);
        l.free(u.grad_shard);
        u.grad_shard = up;
      }
    } else {
      u.grad_shard = input;
    }
    last_reduced = static_cast<int>(i);
  };

  const bool have_shape = model.shape.has_value();
  Dims d{};
  if (have_shape) {
    const auto& sh = *model.shape;
    d = Dims{o.batch * o.seq_len, o.batch, o.seq_len, sh.dim, sh.n_heads * sh.head_dim(),
             sh.n_kv_heads * sh.head_dim(), sh.ffn_hidden, sh.vocab_size, sh.n_heads,
             sh.n_heads / sh.n_kv_heads, pb, mp};
  }

  // One training step; the first runs without prefetch (fully_shard learns the order in it) and
  // creates the optimizer state.
  auto step = [&](bool first) {
    const int fwd_prefetch = first ? 0 : o.forward_prefetch;
    const int bwd_prefetch = first ? 0 : o.backward_prefetch;
    auto prefetch = [&](const std::vector<size_t>& order, size_t pos, int depth) {
      for (size_t k = pos + 1; k < order.size() && depth > 0; ++k, --depth) {
        if (o.limit_all_gathers > 0 && in_flight >= o.limit_all_gathers) break;
        if (needs_gather(order[k])) start_gather(order[k]);
      }
    };
    std::fill(refreshed.begin(), refreshed.end(), false);
    last_reduced = -1;
    // ---- forward -------------------------------------------------------------------------------
    l.at("forward");
    std::vector<Id> inputs;
    if (have_shape) inputs = {l.alloc(kActs, 8 * d.BT), l.alloc(kActs, 8 * d.BT)};  // tokens, targets
    unshard(0);  // the root: embeddings, final norm, output
    prefetch(forward_order, 0, fwd_prefetch);
    Id x = have_shape ? l.alloc(kActs, d.e * d.BT * d.C) : -1;
    std::vector<BlockSaved> saved(us.size());
    for (size_t i = 1; i < us.size(); ++i) {
      l.at("forward of " + model.units[i].name);
      unshard(i);
      prefetch(forward_order, i, fwd_prefetch);
      if (have_shape) {
        saved[i] = block_forward(l, d, x);
        x = saved[i].out;
        if (o.activation_checkpointing) {  // only the block's input stays
          for (Id id : saved[i].attn) l.free(id);
          for (Id id : saved[i].ffn) l.free(id);
          l.free(saved[i].h);
        }
      }
      if (reshard_after_forward) reshard(i);
    }
    // Head: final norm, logits, cross entropy (log_softmax saves its fp32 output).
    l.at("forward of the output layer and loss");
    std::vector<Id> head;
    Id logits = -1, lsm = -1;
    if (have_shape) {
      norm_forward(l, d, head);
      logits = l.alloc(kActs, d.e * d.BT * d.V);
      Id flat = mp ? l.alloc(kActs, f32 * d.BT * d.V) : -1;
      lsm = l.alloc(kActs, f32 * d.BT * d.V);
      l.free(flat);
    }
    if (reshard_after_forward) reshard(0);

    // ---- backward ------------------------------------------------------------------------------
    l.at("backward of the loss and output layer");
    unshard(0);  // pre-backward of the root (its outputs are the logits and the loss)
    const bool pre = bwd_prefetch > 0 && !o.backward_prefetch_post;
    const bool post = bwd_prefetch > 0 && o.backward_prefetch_post;
    if (pre) prefetch(backward_order, 0, bwd_prefetch);
    const GradAlloc root_grad{&l, pb, &us[0].grads};
    if (have_shape) {
      // The root's outputs are the logits and the loss; fsdpp's pre-backward function gets a
      // gradient for both, and autograd materialises the logits' missing one as zeros. They are
      // summed into the output layer's incoming gradient.
      Id zeros = l.alloc(kActs, d.e * d.BT * d.V);
      Id g1 = l.alloc(kActs, f32 * d.BT * d.V);  // nll_loss backward
      Id g2 = l.alloc(kActs, f32 * d.BT * d.V);  // log_softmax backward
      l.free(lsm);
      l.free(g1);
      if (mp) {
        Id g2e = l.alloc(kActs, d.e * d.BT * d.V);
        l.free(g2);
        g2 = g2e;
      }
      l.free(g2);  // added into `zeros` in place
      Id gnf = l.alloc(kActs, d.e * d.BT * d.C);
      root_grad(d.V * d.C);  // output.weight (or the tied embedding's first gradient)
      l.free(zeros);
      const Id nf = head.back();
      l.free(nf);
      Id gx = norm_backward(l, d, gnf);
      root_grad(d.C);
      for (Id id : head) l.free(id);
      l.free(x);  // the last block's output, saved by the final norm
      x = gx;     // now the gradient flowing down
    } else {
      // Without a shape only the parameters are known: the root's gradients arrive here.
      for (const auto& p : model.units[0].params) root_grad(p.numel());
    }
    for (size_t i = us.size() - 1; i >= 1; --i) {
      l.at("backward of " + model.units[i].name);
      const size_t pos = us.size() - i;  // position in backward_order
      unshard(i);
      if (pre) prefetch(backward_order, pos, bwd_prefetch);
      const GradAlloc grad{&l, pb, &us[i].grads};
      if (have_shape) {
        if (o.activation_checkpointing) {  // re-run the block's forward from its saved input
          const Id in = saved[i].x;
          BlockSaved again = block_forward(l, d, in);
          l.free(again.out);
          saved[i] = again;
        }
        x = block_backward(l, d, saved[i], x, grad);
      } else {
        for (const auto& p : model.units[i].params) grad(p.numel());
      }
      if (post) prefetch(backward_order, pos, bwd_prefetch);
      reduce(i);
      reshard(i);
    }
    l.at("backward of the embeddings");
    if (have_shape) {
      // Dense embedding gradient; a tied embedding's second gradient is added into the first.
      if (model.shape->tie_embeddings) {
        l.touch(kGradWork, d.V * d.C * pb);
      } else {
        root_grad(d.V * d.C);
      }
      l.free(x);
    }
    reduce(0);
    reshard(0);
    l.at("end of backward");
    if (last_reduced >= 0) {
      for (Id id : us[last_reduced].in_flight) l.free(id);
    }
    for (Id id : inputs) l.free(id);

    // ---- optimizer step, one parameter at a time: its state the first time (zeros_like), then
    // LibTorch AdamW's two temporaries (exp_avg_sq.sqrt(), and that divided by a scalar) --------
    l.at("optimizer step");
    for (int64_t n : param_shards) {
      if (first) {
        for (int64_t k = 0; k < optim_states; ++k) optim_state.push_back(l.alloc(kOptim, n * f32));
      }
      if (adam_step) {
        Id t1 = l.alloc(kOptim, n * f32), t2 = l.alloc(kOptim, n * f32);
        l.free(t1);
        l.free(t2);
      } else {
        l.touch(kOptim, n * f32);
      }
    }
    for (auto& u : us) l.free(u.grad_shard);  // zero_grad
    l.free(logits);  // the caller's output goes out of scope after the step
  };
  // Two steps reach the steady state; the third lets the heap settle after the first step's
  // optimizer state took memory that the activations had used.
  for (int k = 0; k < 3; ++k) step(k == 0);

  auto p = l.at_peak();
  for (int c = 0; c < kNumCats; ++c) {
    if (!on_device[c]) p[c] = 0;  // offloaded: on the host, reported in e.host
  }
  e.parameters = p[kParams];
  e.gradients = p[kGradWork] + p[kGradShards];
  e.optimizer_state = p[kOptim];
  e.unsharded = p[kUnsharded];
  e.activations = p[kActs];
  e.tensors = l.peak();
  e.allocator = heap ? std::max<int64_t>(0, l.resident_peak() - l.peak()) : 0;
  e.runtime = o.runtime_baseline_bytes;
  e.total = e.tensors + e.allocator + e.runtime;
  e.host = offload ? l.host_peak() : 0;
  e.peak_at = l.peak_where();
  if (!have_shape) e.notes.push_back("activations not estimated: the model was given as a parameter count");
  if (mp) e.notes.push_back("mixed precision: bf16/fp16 gathers and compute, fp32 master shards");
  if (o.activation_checkpointing) e.notes.push_back("activation checkpointing per TransformerBlock");
  if (o.cpu_offload && !o.device_is_gpu)
    e.notes.push_back("CPU offload on a CPU device moves nothing: everything is host memory already");
  if (!o.device_is_gpu && o.mmap_threshold <= 0)
    e.notes.push_back("glibc's default (dynamic) mmap threshold: its heap keeps more than modelled, measured "
                      "up to ~25% more RSS; MALLOC_MMAP_THRESHOLD_=65536 makes RSS follow the live tensors");
  return e;
}

ZeroModelStates zero_model_states(double psi, int n, double k) {
  FSDPP_CHECK_AS(ConfigError, n >= 1, "[estimate] world size {} is not positive", n);
  ZeroModelStates z;
  z.no_shard = (2 + 2 + k) * psi;
  z.zero1 = (2 + 2 + k / n) * psi;
  z.zero2 = (2 + (2 + k) / n) * psi;
  z.zero3 = (2 + 2 + k) * psi / n;
  return z;
}

Recommendation recommend(const ModelDescription& model, const EstimateOptions& base, int64_t budget) {
  Recommendation r;
  auto add = [&](std::string name, ShardingStrategy s, bool ckpt, bool offload) {
    Candidate c;
    c.name = std::move(name);
    c.options = base;
    c.options.strategy = s;
    c.options.activation_checkpointing = ckpt;
    c.options.cpu_offload = offload;
    r.candidates.push_back(std::move(c));
  };
  add("NO_SHARD", ShardingStrategy::NO_SHARD, false, false);
  add("SHARD_GRAD_OP", ShardingStrategy::SHARD_GRAD_OP, false, false);
  add("FULL_SHARD", ShardingStrategy::FULL_SHARD, false, false);
  if (model.shape) add("FULL_SHARD + checkpointing", ShardingStrategy::FULL_SHARD, true, false);
  add(model.shape ? "FULL_SHARD + checkpointing + CPU offload" : "FULL_SHARD + CPU offload",
      ShardingStrategy::FULL_SHARD, model.shape.has_value(), true);
  const double gib = 1024.0 * 1024 * 1024;
  for (auto& c : r.candidates) {
    c.estimate = estimate_memory(model, c.options);
    const auto& e = c.estimate;
    c.fits = e.total <= budget;
    if (c.fits) {
      c.why = fmt::format("fits: {:.2f} GiB <= {:.2f} GiB", e.total / gib, budget / gib);
    } else {
      std::vector<std::pair<int64_t, std::string>> terms = {
          {e.parameters, "parameters"}, {e.gradients, "gradients"}, {e.optimizer_state, "optimizer state"},
          {e.unsharded, "unsharded units"}, {e.activations, "activations"}, {e.runtime, "runtime"}};
      std::sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      c.why = fmt::format("needs {:.2f} GiB > {:.2f} GiB; largest: {} {:.2f} GiB, {} {:.2f} GiB", e.total / gib,
                          budget / gib, terms[0].second, terms[0].first / gib, terms[1].second,
                          terms[1].first / gib);
      if (c.options.cpu_offload && !c.options.device_is_gpu) c.why += " (offload frees nothing on a CPU device)";
    }
    if (c.fits && r.chosen < 0) r.chosen = static_cast<int>(&c - r.candidates.data());
  }
  return r;
}

}  // namespace fsdpp
