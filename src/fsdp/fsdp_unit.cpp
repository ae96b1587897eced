#include "fsdp_unit.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "activation_checkpoint_region.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"

namespace fsdpp {

FSDPUnit* find_unit(torch::nn::Module& module) {
  for (const auto& child : module.named_children()) {
    if (child.key() == FSDPUnit::kChildName) return dynamic_cast<FSDPUnit*>(child.value().get());
  }
  return nullptr;
}

FSDPUnit::FSDPUnit(torch::nn::Module& module, const FullyShardOptions& options,
                   std::vector<std::pair<std::string, at::Tensor>> params)
    : torch::nn::Module("FSDPUnit"),
      module_(&module),
      options_(options),
      name_(module.name()),
      root_state_(std::make_unique<FSDPRootState>(*this)) {  // a root until it gets a parent
  const auto& mesh = *options_.mesh;
  const auto s = options_.strategy;
  const StrategyTraits& traits = traits_of(s);
  if (traits.hybrid) {
    // Dim 0 replicates, dim 1 shards, whatever their names ("replicate"/"shard", or
    // torchtitan's "dp_replicate"/"dp_shard").
    FSDPP_CHECK_AS(ConfigError, mesh.ndim() == 2,
                   "[fsdp] {} needs a 2-D mesh (replicate, shard); got a {}-D mesh",
                   to_string(s), mesh.ndim());
    replicate_group_ = mesh.group(0);
    shard_group_ = mesh.group(1);
  } else {
    FSDPP_CHECK_AS(ConfigError, mesh.ndim() == 1,
                   "[fsdp] {} shards over a 1-D mesh; got a {}-D mesh (use HYBRID_SHARD for 2-D)",
                   to_string(s), mesh.ndim());
    if (!traits.shards) {
      replicate_group_ = mesh.group(0);
    } else {
      shard_group_ = mesh.group(0);
    }
  }
  if (shard_group_ && shard_group_->size() == 1) shard_group_.reset();
  if (replicate_group_ && replicate_group_->size() == 1) replicate_group_.reset();
  shard_world_ = shard_group_ ? shard_group_->size() : 1;
  shard_rank_ = shard_group_ ? shard_group_->rank() : 0;
  const int replicas = replicate_group_ ? replicate_group_->size() : 1;
  divide_factor_ = options_.gradient_divide_factor > 0 ? options_.gradient_divide_factor
                                                       : static_cast<double>(shard_world_ * replicas);

  at::TensorOptions flat_options;
  for (auto& [fqn, p] : params) {
    FSDPP_CHECK(p.is_floating_point(), "[fsdp] parameter '{}' of module '{}' has dtype {}; FSDP "
                "shards floating-point parameters only", fqn, name_, c10::toString(p.scalar_type()));
    if (!params_.empty()) {
      FSDPP_CHECK(p.scalar_type() == flat_options.dtype().toScalarType() &&
                      p.device() == flat_options.device(),
                  "[fsdp] parameter '{}' is {} on {} but the unit's first parameter is {} on {}; "
                  "one unit holds one dtype on one device",
                  fqn, c10::toString(p.scalar_type()), p.device().str(),
                  c10::toString(flat_options.dtype().toScalarType()), flat_options.device().str());
    } else {
      flat_options = p.options().requires_grad(false);
    }
    params_.push_back(std::make_unique<FSDPParam>(fqn, p, shard_rank_, shard_world_,
                                                  total_shard_numel_));
    if (options_.outer_layout) params_.back()->set_outer(options_.outer_layout(p));
    total_shard_numel_ += params_.back()->shard_numel();
    if (p.requires_grad()) ++num_trainable_;
  }
  if (params_.empty()) return;
  const auto& mp = options_.mp_policy;
  for (const auto& d : {mp.param_dtype, mp.reduce_dtype, mp.output_dtype}) {
    FSDPP_CHECK_AS(ConfigError, !d || at::isFloatingType(*d),
                   "[fsdp] MixedPrecisionPolicy dtype {} for unit '{}' is not a floating-point "
                   "type; use float32, bfloat16 or float16",
                   c10::toString(*d), name_);
  }
  const auto master_dtype = flat_options.dtype().toScalarType();
  param_dtype_ = mp.param_dtype.value_or(master_dtype);
  reduce_dtype_ = mp.reduce_dtype.value_or(param_dtype_);
  if (reduce_dtype_ == at::kHalf && divide_factor_ == std::floor(divide_factor_)) {
    // As PyTorch FSDP: divide by about sqrt(factor) before the sum and the rest after, so that
    // neither the sum of many gradients nor tiny quotients leave float16's range.
    const auto n = static_cast<int64_t>(divide_factor_);
    int64_t f = 1;
    while (n % (f * 2) == 0 && n / (f * 2) >= f * 2) f *= 2;
    predivide_factor_ = static_cast<double>(f);
  }
  allocate_shards(flat_options, /*take_values=*/true);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i]->requires_grad) watch_gradient(i);
  }
  gathered_versions_.assign(params_.size(), -1);
  plan_reduce_buckets();
}

void FSDPUnit::allocate_shards(const at::TensorOptions& flat_options, bool take_values) {
  compute_device_ = flat_options.device();
  at::TensorOptions shard_options = flat_options;
  // Parameters without storage (the meta device) get shards without storage: to_empty() gives
  // them some on the device the caller names.
  if (options_.offload_policy.offload_params && !compute_device_.is_meta()) {
    shard_options = shard_options.device(at::kCPU);
    if (options_.offload_policy.pin_memory && !compute_device_.is_cpu()) {
      shard_options = shard_options.pinned_memory(true);
    }
  }
  separate_unsharded_ = shard_world_ > 1 || param_dtype_ != flat_options.dtype().toScalarType() ||
                        compute_device_ != shard_options.device();
  at::NoGradGuard no_grad;
  // The full parameters this rank held, before their data becomes the shards.
  std::vector<at::Tensor> full(params_.size());
  if (take_values) {
    for (size_t i = 0; i < params_.size(); ++i) full[i] = params_[i]->param.detach();
  }
  flat_shard_ = take_values ? at::empty({total_shard_numel_}, shard_options)
                            : at::zeros({total_shard_numel_}, shard_options);
  const auto unsharded_options = flat_options.dtype(param_dtype_);
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i]->init_shard(flat_shard_, full[i], unsharded_options, separate_unsharded_);
  }
}

void FSDPUnit::to_empty(at::Device device) {
  if (params_.empty() || !flat_shard_.is_meta()) return;
  FSDPP_CHECK_AS(ConfigError, !device.is_meta(),
                 "[fsdp] to_empty: unit '{}' needs a device with storage; got meta", name_);
  FSDPP_CHECK(state_ == UnitState::IDLE && sharded_,
              "[fsdp] to_empty: unit '{}' is in the middle of a forward or backward", name_);
  allocate_shards(flat_shard_.options().device(device).pinned_memory(false),
                  /*take_values=*/false);
  gathered_valid_ = false;
}

void FSDPUnit::plan_reduce_buckets() {
  const int64_t cap = options_.reduce_bucket_size;
  bucket_of_.assign(params_.size(), 0);
  size_t end = params_.size();
  int64_t numel = 0;
  for (size_t i = params_.size(); i-- > 0;) {
    numel += params_[i]->shard_numel() * shard_world_;
    // Without a cap, or with what is left too small to be worth its own collective, the
    // bucket runs to the unit's first parameter.
    if (i > 0 && (cap == 0 || numel < cap)) continue;
    ReduceBucket b{.first = i, .end = end, .begin = params_[i]->offset};
    b.numel = params_[end - 1]->offset + params_[end - 1]->shard_numel() - b.begin;
    for (size_t j = i; j < end; ++j) {
      bucket_of_[j] = buckets_.size();
      if (params_[j]->requires_grad) ++b.trainable;
    }
    buckets_.push_back(b);
    end = i;
    numel = 0;
  }
}

bool FSDPUnit::reshard_after_forward() const {
  return reshard_after_forward_.value_or(traits_of(options_.strategy).reshard_after_forward);
}

void FSDPUnit::set_reshard_after_forward(bool reshard) {
  const auto& t = traits_of(options_.strategy);
  FSDPP_CHECK_AS(ConfigError, !reshard || (t.shards && !t.keep_unsharded_between_steps),
                 "[fsdp] set_reshard_after_forward(true) on unit '{}': {} {}; only "
                 "set_reshard_after_forward(false) applies to it",
                 name_, to_string(options_.strategy),
                 t.shards ? "keeps parameters gathered between steps" : "does not shard");
  // Read only at the end of the unit's forward, so a change at any other time is safe.
  reshard_after_forward_ = reshard;
}

bool FSDPUnit::keep_unsharded_between_steps() const {
  return traits_of(options_.strategy).keep_unsharded_between_steps;
}

void FSDPUnit::adopt_children() {
  for (const auto& item : module_->named_modules("", /*include_self=*/false)) {
    FSDPUnit* u = find_unit(*item.value());
    if (u && u != this) {
      u->has_parent_ = true;
      u->root_state_.reset();
      u->root_ = nullptr;  // until this unit's lazy_init
    }
  }
}

FSDPRootState& FSDPUnit::root() {
  FSDPRootState* r = has_parent_ ? root_ : root_state_.get();
  FSDPP_CHECK(r, "[fsdp] unit '{}' is inside a root unit that has not run its first forward; "
              "call the root module through fsdpp::forward(root, ...)", name_);
  return *r;
}

const std::vector<FSDPUnit*>& FSDPUnit::all_units() {
  FSDPP_CHECK(is_root(), "[fsdp] lazy_init on unit '{}', which is not a root", name_);
  return root_state_->units();
}

void FSDPUnit::set_requires_gradient_sync(bool sync) {
  FSDPP_CHECK(is_root(), "[fsdp] set_requires_gradient_sync on unit '{}', which is not a root",
              name_);
  root_state_->set_requires_gradient_sync(sync);
}

std::vector<std::pair<std::string, at::Tensor>> FSDPUnit::full_parameters() {
  // The master values, gathered on the compute device (where the collective runs) and
  // returned next to the master shards.
  const auto views = sharded_params();
  std::vector<const ShardedParam*> ps;
  std::vector<at::Tensor> shards;
  for (const auto& v : views) {
    ps.push_back(&v);
    shards.push_back(v.local_shard);
  }
  auto full = gather_full(ps, shards);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < views.size(); ++i) out.emplace_back(views[i].fqn, std::move(full[i]));
  return out;
}

int64_t FSDPUnit::unsharded_bytes() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->unsharded_bytes();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Gather and free

bool FSDPUnit::gathered_current() const {
  if (!gathered_valid_) return false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i]->param._version() != gathered_versions_[i]) return false;
  }
  return true;
}

at::Tensor FSDPUnit::gather_input() const {
  if (flat_shard_.device() == compute_device_ && flat_shard_.scalar_type() == param_dtype_) {
    return flat_shard_;  // the flat shard is the all-gather input, no copy
  }
  return flat_shard_.to(compute_device_, param_dtype_, /*non_blocking=*/flat_shard_.is_pinned());
}

void FSDPUnit::start_unshard() {
  if (!sharded_ || !separate_unsharded_ || params_.empty() || pending_gather_ ||
      gathered_current()) {
    return;
  }
  at::NoGradGuard no_grad;
  FSDPCommContext& comm = root().comm(compute_device_);
  PendingGather g;
  {
    // The copy-in, the gathered buffer and the all-gather's issue on the copy-in stream (the
    // CPU's: in place).
    dist::StreamGuard on(comm.all_gather_copy_in());
    comm.before_copy_in();
    g.input = gather_input();
    if (shard_world_ > 1) {
      g.gathered = at::empty({shard_world_ * total_shard_numel_}, g.input.options());
      g.work = shard_group_->all_gather_into_tensor_async(g.gathered, g.input, tag());
    } else {
      g.gathered = g.input;  // one rank: the converted shard is the whole parameter set
      g.copied_in.record(comm.all_gather_copy_in());
    }
  }
  pending_gather_ = std::move(g);
  root().gather_started();
}

void FSDPUnit::finish_unshard() {
  start_unshard();  // a no-op when prefetched or still gathered
  if (!pending_gather_) return;
  auto g = std::move(*pending_gather_);
  pending_gather_.reset();
  root().gather_finished();
  // The compute stream waits for the gather (the CPU: for the collective itself).
  if (g.work.valid()) g.work.wait();
  dist::Stream::current(compute_device_).wait(g.copied_in);
  release_alias();  // a gather kept between steps (ZERO1) and gathered again
  if (can_alias(g)) {
    for (auto& p : params_) p->alias_unsharded(g.gathered);
    aliased_ = std::move(g);
  } else {
    for (auto& p : params_) p->alloc_unsharded();
    auto rows = g.gathered.view({shard_world_, total_shard_numel_});
    for (auto& p : params_) p->copy_out(rows, p->unsharded);
    retire(g);
  }
  for (size_t i = 0; i < params_.size(); ++i) gathered_versions_[i] = params_[i]->param._version();
  gathered_valid_ = true;
}

void FSDPUnit::drop_prefetch() {
  if (!pending_gather_) return;
  auto g = std::move(*pending_gather_);
  pending_gather_.reset();
  root().gather_finished();
  if (g.work.valid()) g.work.wait();  // the buffers must outlive the collective
  retire(g);
}

void FSDPUnit::retire(PendingGather& g) {
  root().comm(compute_device_).retire_gather({std::move(g.gathered), std::move(g.input)});
}

// At one rank (FSDPParam::aliasable) the gathered buffer is the shard converted to the param
// dtype, a tensor of its own (not the master shard: the optimizer must not write what the
// parameters read).
bool FSDPUnit::can_alias(const PendingGather& g) const {
  if (g.gathered.is_same(flat_shard_)) return false;
  return std::all_of(params_.begin(), params_.end(), [&](const auto& p) { return p->aliasable(g.gathered); });
}

void FSDPUnit::release_alias() {
  if (!aliased_) return;
  retire(*aliased_);
  aliased_.reset();
}

void FSDPUnit::unshard() {
  if (!sharded_) return;
  at::NoGradGuard no_grad;
  if (separate_unsharded_ && !params_.empty()) finish_unshard();
  for (auto& p : params_) p->use_unsharded();
  sharded_ = false;
}

at::Tensor FSDPUnit::cast_forward_input(const at::Tensor& t) const {
  const auto& mp = options_.mp_policy;
  if (!mp.param_dtype || !mp.cast_forward_inputs || !t.defined() || !t.is_floating_point() ||
      t.scalar_type() == *mp.param_dtype) {
    return t;
  }
  return t.to(*mp.param_dtype);
}

void FSDPUnit::reshard(bool free_unsharded) {
  if (sharded_ || held_) return;
  for (auto& p : params_) p->use_shard();
  if (free_unsharded) {
    for (auto& p : params_) p->free_unsharded();
    release_alias();
    gathered_valid_ = false;
  }
  sharded_ = true;
}

void FSDPUnit::hold() {
  if (sharded_ && !params_.empty()) root().comm(compute_device_).gathers_follow_compute();
  unshard();
  held_ = true;
}

void FSDPUnit::release() {
  held_ = false;
  reshard(!keep_unsharded_between_steps());
}

// ---------------------------------------------------------------------------------------------
// Forward

dist::TraceRecorder::Clock::time_point FSDPUnit::trace_begin() const {
  auto* t = trace();
  return t && t->active() ? dist::TraceRecorder::Clock::now() : dist::TraceRecorder::Clock::time_point{};
}

void FSDPUnit::trace_end(const char* what, dist::TraceRecorder::Clock::time_point begin) const {
  auto* t = trace();
  if (!t || !t->active() || begin == dist::TraceRecorder::Clock::time_point{}) return;
  t->complete(t->thread_track(), fmt::format("{} {}", what, name_), begin,
              dist::TraceRecorder::Clock::now(), {{"unit", name_}});
}

void FSDPUnit::pre_forward() {
  const auto phase = detail::checkpoint_phase();
  // A program without a trainer counts its steps by the root's training forwards (trace.h).
  if (auto* t = trace(); t && is_root() && at::GradMode::is_enabled()) t->auto_step();
  forward_began_ = trace_begin();
  FSDPP_CHECK(!on_meta(),
              "[fsdp] unit '{}' has no storage: its parameters were made on the meta device. "
              "Give them some with fsdpp::to_empty(root, device) and initialise them "
              "(fsdpp/fsdp/deferred_init.h) before the first forward",
              name_);
  if (is_root()) {
    root_state_->lazy_init();
    if (phase != detail::CheckpointPhase::RECOMPUTE) root_state_->begin_forward();
  } else {
    FSDPP_CHECK(root_ && (root_->forward_active() || phase == detail::CheckpointPhase::RECOMPUTE),
                "[fsdp] unit '{}' was called outside its root's forward; its parameters are "
                "sharded at rest. Call the root module through fsdpp::forward(root, ...), and "
                "this unit from the root's forward",
                name_);
  }
  unshard();
  state_ = UnitState::FORWARD;
  if (phase != detail::CheckpointPhase::RECOMPUTE) {
    FSDPRootState& r = root();
    r.record_forward(*this);
    r.prefetch_after(*this, FSDPRootState::Pass::FORWARD, options_.forward_prefetch);
  }
}

std::vector<at::Tensor> FSDPUnit::post_forward(std::vector<at::Tensor> outputs) {
  const bool grad = at::GradMode::is_enabled();
  const auto phase = detail::checkpoint_phase();
  bool reshard_now = true;
  if (phase == detail::CheckpointPhase::RECOMPUTE) {
    // The backward of the recomputed graph comes next and needs these parameters: keeping
    // them saves the all-gather that resharding here would cost.
    reshard_now = false;
  } else if (grad || phase == detail::CheckpointPhase::FORWARD) {
    // A checkpointed forward runs without grad, but its backward follows as for a plain one.
    reshard_now = reshard_after_forward();
  }
  if (reshard_now) reshard(!keep_unsharded_between_steps());
  state_ = UnitState::IDLE;
  if (is_root() && phase != detail::CheckpointPhase::RECOMPUTE) root_state_->end_forward();
  trace_end(phase == detail::CheckpointPhase::RECOMPUTE ? "recompute" : "forward", forward_began_);
  if (const auto& out_dtype = options_.mp_policy.output_dtype) {
    for (auto& o : outputs) {
      if (o.defined() && o.is_floating_point() && o.scalar_type() != *out_dtype) o = o.to(*out_dtype);
    }
  }
  if (!grad) return outputs;
  return hook_outputs(std::move(outputs));
}

void FSDPUnit::forward_failed() {
  reshard(!keep_unsharded_between_steps());
  state_ = UnitState::IDLE;
  if (is_root() && detail::checkpoint_phase() != detail::CheckpointPhase::RECOMPUTE) {
    root_state_->forward_failed();
  }
}

}  // namespace fsdpp
