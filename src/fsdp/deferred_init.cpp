// Parameters without storage, sharded, then given this rank's storage and values. See
// include/fsdpp/fsdp/deferred_init.h.
#include "fsdpp/fsdp/deferred_init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>

#include <fmt/ranges.h>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/sharded_param.h"

namespace fsdpp {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// A parameter as init and loading see it: its name, and where this rank keeps which rows of
// the whole tensor (a plain module's parameter is held whole).
struct Target {
  ShardedParam view;
  int64_t rows() const { return view.global_shape.empty() ? 1 : view.global_shape[0]; }
  int64_t row_numel() const { return numel_of(view.global_shape) / std::max<int64_t>(rows(), 1); }
};

// Every parameter of the parts by name: the views of a fully_shard-ed root's units, or a plain
// module's parameters whole.
std::map<std::string, Target> targets_of(const std::vector<torch::nn::Module*>& parts, const char* what) {
  std::map<std::string, Target> out;
  auto add = [&](ShardedParam v) {
    const std::string name = v.fqn;
    FSDPP_CHECK(out.emplace(name, Target{std::move(v)}).second,
                "[fsdp] {}: parameter '{}' is in two of the parts given", what, name);
  };
  for (auto* part : parts) {
    FSDPP_CHECK(part != nullptr, "[fsdp] {}: a part is null", what);
    if (FSDPUnit* unit = find_unit(*part)) {
      FSDPP_CHECK(unit->is_root(), "[fsdp] {} needs the module given last to fully_shard; '{}' is "
                  "inside another unit", what, unit->name());
    }
    for (auto& v : placed_params(*part, {}, what)) add(std::move(v));
  }
  return out;
}

// Copies what this rank keeps of rows [first, first + rows.size(0)) of the whole parameter
// (dims past 0 whole) into its local shard, through the registered parameter so that its
// version counter moves (a unit that keeps its gathered parameters gathers again).
void write_rows(const ShardedParam& v, int64_t first, const at::Tensor& rows) {
  const int64_t a = v.row_begin(), own = v.own_rows();
  const int64_t lo = std::max(first, a), hi = std::min(first + rows.size(0), a + own);
  if (lo >= hi) return;
  FSDPP_CHECK(v.at_rest, "[fsdp] parameter '{}' is gathered (inside a forward or backward); "
              "initialise or load between steps", v.fqn);
  auto local = v.local_of_rows(rows.narrow(0, lo - first, hi - lo));
  auto dst = v.param.detach();
  dst = dst.view({v.chunk_rows(), dst.numel() / std::max<int64_t>(v.chunk_rows(), 1)});
  dst.narrow(0, lo - a, hi - lo).copy_(local.reshape({hi - lo, -1}));
}

std::vector<int64_t> chunk_shape(const std::vector<int64_t>& whole, int64_t rows) {
  std::vector<int64_t> s = whole.empty() ? std::vector<int64_t>{1} : whole;
  s[0] = rows;
  return s;
}

// Rows per chunk: at most `chunk_bytes` of float32 (at least one row), a multiple of `granule`.
int64_t rows_per_chunk(int64_t row_numel, int64_t chunk_bytes, int64_t granule) {
  const int64_t fit = chunk_bytes / (4 * std::max<int64_t>(row_numel, 1));
  return std::max(granule, fit / granule * granule);
}

void check_plan(const std::map<std::string, Target>& targets, const InitPlan& plan, const char* what) {
  std::map<std::string, const ParamInit*> by_name;
  for (const auto& s : plan.params) {
    FSDPP_CHECK(by_name.emplace(s.name, &s).second, "[fsdp] {}: the init plan lists '{}' twice",
                what, s.name);
  }
  for (const auto& [name, t] : targets) {
    auto it = by_name.find(name);
    FSDPP_CHECK(it != by_name.end(),
                "[fsdp] {}: parameter '{}' of the model is not in the init plan ({} entries); "
                "the plan must describe every parameter",
                what, name, plan.params.size());
    FSDPP_CHECK(it->second->shape == t.view.global_shape,
                "[fsdp] {}: parameter '{}' has whole shape [{}] but the init plan says [{}]", what,
                name, fmt::join(t.view.global_shape, ", "), fmt::join(it->second->shape, ", "));
  }
}

// FILL: this rank's rows, chunk by chunk.
void fill_rows(const Target& t, double value, int64_t chunk_bytes) {
  const int64_t a = t.view.row_begin(), own = t.view.own_rows();
  const int64_t per = rows_per_chunk(t.row_numel(), chunk_bytes, 1);
  for (int64_t r = a; r < a + own; r += per) {
    const int64_t rc = std::min(per, a + own - r);
    write_rows(t.view, r, at::full(chunk_shape(t.view.global_shape, rc), value, at::kFloat));
  }
}

// Advances the generator as normal_ on `count` elements would without computing them: one
// 32-bit draw per element, 16 more when count is not a multiple of 16 (normal_ redraws the
// last 16) (ATen's normal_fill for float tensors of 16 elements or more).
void skip_normal(at::Generator& gen, int64_t count) {
  const int64_t draws = count + (count % 16 != 0 ? 16 : 0);
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto* g = gen.get<at::CPUGeneratorImpl>();
  // CPUGeneratorImpl::random() is one step of its mt19937, whose operator() is inline.
  at::mt19937 engine = g->engine();
  for (int64_t i = 0; i < draws; ++i) engine();
  g->set_engine(engine);
}

// One NORMAL entry drawn as normal_ on the whole tensor would draw it, in chunks: ATen's CPU
// normal_ for 16 elements or more draws one uniform per element, then turns each block of 16
// into normals (pairs 8 apart), and when the count is not a multiple of 16 redraws the last 16.
// Chunks of a multiple of 16 elements, the last of at least 16 and ending where the tensor
// ends, therefore draw exactly the whole tensor's values. `t` null: this rank holds none of it.
void draw_exact(at::Generator& gen, const ParamInit& s, const Target* t, int64_t chunk_bytes) {
  const int64_t n = numel_of(s.shape);
  if (n == 0) return;
  const int64_t dim0 = s.shape.empty() ? 1 : s.shape[0];
  const int64_t row_numel = n / dim0;
  if (n < 16) {  // normal_ draws element by element: the whole tensor, as eager init does
    auto values = at::empty(chunk_shape(s.shape, dim0), at::kFloat);
    values.normal_(s.mean, s.std, gen);
    if (t) write_rows(t->view, 0, values);
    return;
  }
  const int64_t granule = 16 / std::gcd(row_numel, int64_t{16});
  const int64_t per = rows_per_chunk(row_numel, chunk_bytes, granule);
  const int64_t a = t ? t->view.row_begin() : 0, own = t ? t->view.own_rows() : 0;
  at::Tensor buffer;
  for (int64_t r = 0; r < dim0;) {
    int64_t rc = std::min(per, dim0 - r);
    // A tail of fewer than 16 elements would take normal_'s element-by-element path: it joins
    // this chunk.
    if (r + rc < dim0 && (dim0 - r - rc) * row_numel < 16) rc = dim0 - r;
    const bool mine = t && r < a + own && a < r + rc;
    if (mine) {
      if (!buffer.defined() || buffer.size(0) < rc) {
        buffer = at::empty(chunk_shape(s.shape, std::max(rc, std::min(per, dim0))), at::kFloat);
      }
      auto values = buffer.narrow(0, 0, rc);
      values.normal_(s.mean, s.std, gen);
      write_rows(t->view, r, values);
    } else {
      skip_normal(gen, rc * row_numel);
    }
    r += rc;
  }
}

uint64_t key_of(const std::string& name) {  // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Elements [first, first + count) of a parameter's counter-based normals: element e from the
// 32-bit words 2e and 2e + 1 of Philox(seed, key), i.e. lanes 0-1 or 2-3 of 128-bit block e / 2.
at::Tensor philox_normals(uint64_t seed, uint64_t key, int64_t first, int64_t count, double mean,
                          double std) {
  auto u1 = at::empty({count}, at::kDouble), u2 = at::empty({count}, at::kDouble);
  auto* p1 = u1.data_ptr<double>();
  auto* p2 = u2.data_ptr<double>();
  at::philox_engine engine(seed, key, static_cast<uint64_t>(first / 2));
  if (first % 2 != 0) {
    engine();
    engine();
  }
  constexpr double kScale = 1.0 / 4294967296.0;  // 2^-32
  for (int64_t i = 0; i < count; ++i) {
    p1[i] = (static_cast<double>(engine()) + 1.0) * kScale;  // (0, 1]: log is finite
    p2[i] = static_cast<double>(engine()) * kScale;           // [0, 1)
  }
  auto z = at::sqrt(-2.0 * at::log(u1)) * at::cos(2.0 * M_PI * u2);
  return (z * std + mean).to(at::kFloat);
}

}  // namespace

void rebind_data(at::Tensor& tensor, const at::Tensor& data) {
  if (at::_has_compatible_shallow_copy_type(tensor, data)) {
    tensor.set_data(data);
    return;
  }
  FSDPP_CHECK(tensor.is_meta() || data.is_meta(),
              "[fsdp] rebind_data: a {} tensor cannot take the data of a {} tensor",
              tensor.device().str(), data.device().str());
  // What set_data does, without its check that both are dense tensors of one kind (meta is not).
  if (auto* meta = torch::autograd::impl::get_autograd_meta(tensor)) {
    std::lock_guard<std::mutex> lock(meta->mutex_);
    meta->grad_accumulator_.reset();
  }
  tensor.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

void to_meta(torch::nn::Module& module) {
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    FSDPP_CHECK(!find_unit(*item.value()),
                "[fsdp] to_meta: module '{}' is (or holds) an FSDP unit; move modules to the meta "
                "device before fully_shard",
                item.key().empty() ? module.name() : item.key());
  }
  at::NoGradGuard no_grad;
  for (auto& p : module.parameters(/*recurse=*/true)) {
    if (!p.is_meta()) rebind_data(p, at::empty(p.sizes(), p.options().device(at::kMeta)));
  }
  for (auto& b : module.buffers(/*recurse=*/true)) {
    if (b.defined() && !b.is_meta()) rebind_data(b, at::empty(b.sizes(), b.options().device(at::kMeta)));
  }
}

bool has_meta_tensors(torch::nn::Module& module) {
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (FSDPUnit* u = find_unit(*m); u && u->on_meta()) return true;
  }
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (p.is_meta()) return true;
  }
  for (const auto& b : module.buffers(/*recurse=*/true)) {
    if (b.defined() && b.is_meta()) return true;
  }
  return false;
}

void to_empty(const std::vector<torch::nn::Module*>& parts, at::Device device) {
  FSDPP_CHECK_AS(ConfigError, !device.is_meta(), "[fsdp] to_empty needs a device with storage; got meta");
  at::NoGradGuard no_grad;
  for (auto* part : parts) {
    for (const auto& m : part->modules(/*include_self=*/true)) {
      if (FSDPUnit* u = find_unit(*m)) u->to_empty(device);
    }
    for (auto& p : part->parameters(/*recurse=*/true)) {
      if (p.is_meta()) rebind_data(p, at::zeros(p.sizes(), p.options().device(device)));
    }
    for (auto& b : part->buffers(/*recurse=*/true)) {
      if (!b.defined()) continue;
      if (b.is_meta()) {
        rebind_data(b, at::zeros(b.sizes(), b.options().device(device)));
      } else if (b.device() != device) {
        b.set_data(b.to(device));
      }
    }
  }
}

void to_empty(torch::nn::Module& root, at::Device device) { to_empty(std::vector{&root}, device); }

void init_whole(torch::nn::Module& module, const InitPlan& plan) {
  const auto targets = targets_of({&module}, "init_whole");
  check_plan(targets, plan, "init_whole");
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(plan.seed);
  auto params = module.named_parameters(/*recurse=*/true);
  for (const auto& s : plan.params) {
    auto* p = params.find(s.name);
    if (s.kind == ParamInit::Kind::FILL) {
      if (p) p->fill_(s.value);
      continue;
    }
    // Drawn in float32 on the CPU whatever the parameter's dtype and device, so that the
    // values depend on the seed alone.
    auto values = at::empty(s.shape, at::kFloat);
    values.normal_(s.mean, s.std, gen);
    if (p) p->copy_(values);
  }
}

void init_exact(const std::vector<torch::nn::Module*>& parts, const InitPlan& plan,
                const InitOptions& options) {
  const auto targets = targets_of(parts, "init_exact");
  check_plan(targets, plan, "init_exact");
  at::NoGradGuard no_grad;
  // Past the last entry this rank holds, nothing more needs drawing.
  size_t end = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    if (targets.count(plan.params[i].name)) end = i + 1;
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(plan.seed);
  for (size_t i = 0; i < end; ++i) {
    const auto& s = plan.params[i];
    auto it = targets.find(s.name);
    const Target* t = it == targets.end() ? nullptr : &it->second;
    if (s.kind == ParamInit::Kind::FILL) {
      if (t) fill_rows(*t, s.value, options.chunk_bytes);
    } else {
      draw_exact(gen, s, t, options.chunk_bytes);
    }
  }
}

void init_exact(torch::nn::Module& root, const InitPlan& plan, const InitOptions& options) {
  init_exact(std::vector{&root}, plan, options);
}

void init_per_shard(const std::vector<torch::nn::Module*>& parts, const InitPlan& plan,
                    const InitOptions& options) {
  const auto targets = targets_of(parts, "init_per_shard");
  check_plan(targets, plan, "init_per_shard");
  at::NoGradGuard no_grad;
  for (const auto& s : plan.params) {
    auto it = targets.find(s.name);
    if (it == targets.end()) continue;
    const Target& t = it->second;
    if (s.kind == ParamInit::Kind::FILL) {
      fill_rows(t, s.value, options.chunk_bytes);
      continue;
    }
    const int64_t a = t.view.row_begin(), own = t.view.own_rows(), c = t.row_numel();
    // The element-wise transform holds a few double copies of a chunk: an eighth of the bytes.
    const int64_t per = rows_per_chunk(c, std::max<int64_t>(options.chunk_bytes / 8, 1), 1);
    const uint64_t key = key_of(s.name);
    for (int64_t r = a; r < a + own; r += per) {
      const int64_t rc = std::min(per, a + own - r);
      auto values = philox_normals(plan.seed, key, r * c, rc * c, s.mean, s.std);
      write_rows(t.view, r, values.view(chunk_shape(s.shape, rc)));
    }
  }
}

void init_per_shard(torch::nn::Module& root, const InitPlan& plan, const InitOptions& options) {
  init_per_shard(std::vector{&root}, plan, options);
}

void init_shards(torch::nn::Module& root,
                 const std::function<void(torch::nn::Module&)>& param_init_fn) {
  FSDPP_CHECK(!has_meta_tensors(root),
              "[fsdp] init_shards: module '{}' has tensors without storage; call "
              "fsdpp::to_empty(root, device) first",
              root.name());
  const auto targets = targets_of({&root}, "init_shards");
  for (const auto& t : targets) {
    FSDPP_CHECK(t.second.view.at_rest, "[fsdp] init_shards: parameter '{}' is gathered; "
                "initialise between steps", t.first);
  }
  {
    at::NoGradGuard no_grad;
    for (const auto& m : root.modules(/*include_self=*/true)) {
      if (dynamic_cast<FSDPUnit*>(m.get())) continue;
      if (!m->named_parameters(/*recurse=*/false).is_empty()) param_init_fn(*m);
    }
  }
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    const int64_t own = t.view.own_rows(), chunk = t.view.chunk_rows();
    if (own >= chunk) continue;
    auto dst = t.view.param.detach();
    dst.view({chunk, -1}).narrow(0, own, chunk - own).zero_();
  }
}

void load_rows(const std::vector<torch::nn::Module*>& parts, const RowReader& read,
               const InitOptions& options) {
  const auto targets = targets_of(parts, "load_rows");
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    const int64_t a = t.view.row_begin(), own = t.view.own_rows();
    const int64_t per = rows_per_chunk(t.row_numel(), options.chunk_bytes, 1);
    for (int64_t r = a; r < a + own; r += per) {
      const int64_t rc = std::min(per, a + own - r);
      at::Tensor rows = read(name, r, rc);
      const auto want = chunk_shape(t.view.global_shape, rc);
      FSDPP_CHECK(rows.defined() && rows.sizes().vec() == want,
                  "[fsdp] load_rows: reading rows [{}, {}) of '{}' gave a tensor of shape [{}]; "
                  "expected [{}]",
                  r, r + rc, name, rows.defined() ? fmt::format("{}", fmt::join(rows.sizes(), ", ")) : "undefined",
                  fmt::join(want, ", "));
      write_rows(t.view, r, rows);
    }
  }
}

}  // namespace fsdpp
