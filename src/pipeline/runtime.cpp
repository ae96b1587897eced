// The pipeline runtime (fsdpp/pipeline/runtime.h): one step runs this rank's action list in
// order; what an action produces waits in State until the action that consumes it.

#include "fsdpp/pipeline/runtime.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/string_collectives.h"
#include "fsdpp/pipeline/communication.h"
#include "fsdpp/pipeline/stall_check.h"
#include "fsdpp/pipeline/verify.h"
#include "split_backward.h"

namespace fsdpp::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxDims = 8;

// Thrown where this rank stops because another posted its failure: not posted again.
struct StoppedByPeer : Error {
  using Error::Error;
};

std::string sizes_text(const std::vector<int64_t>& sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

std::string spec_text(const TensorSpec& spec) {
  std::vector<std::string> dims;
  for (auto d : spec.sizes) dims.push_back(d < 0 ? "*" : std::to_string(d));
  return fmt::format("[{}] {}", fmt::join(dims, ", "), c10::toString(spec.dtype));
}

bool matches(const TensorSpec& spec, const std::vector<int64_t>& sizes, at::ScalarType dtype) {
  if (spec.dtype != dtype || spec.sizes.size() != sizes.size()) return false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (spec.sizes[i] >= 0 && spec.sizes[i] != sizes[i]) return false;
  }
  return true;
}

}  // namespace

// Per step. Slots are per (stage, microbatch); only this rank's stages' are used.
struct PipelineRuntime::State {
  struct Slot {
    at::Tensor input;     // what the stage's forward took (a leaf requiring grad after stage 0)
    at::Tensor output;    // its result with its graph (the loss on the last stage)
    at::Tensor received;  // the activation received for it
    at::Tensor out_grad;  // the gradient of output, received or from the next local stage
    at::Tensor in_grad;   // the gradient of input, made by B or I
    std::unique_ptr<detail::SplitBackward> split;  // between I and W
  };
  int m = 0;
  std::vector<Slot> slots;  // (num_stages * m)
  std::vector<at::Tensor> inputs, targets;
  std::vector<at::Tensor> shared;  // every stage's microbatch rows of step()'s `shared`; or none
  std::vector<std::pair<dist::Work, at::Tensor>> sends;
  std::map<size_t, std::pair<dist::Work, at::Tensor>> posted;  // recvs by action index
  std::vector<double> losses;
  MicrobatchLoss loss;  // the step's, in place of the last stage's own (empty: its own)
  Clock::time_point t0;
  Clock::time_point last_abort_check;
  Slot& at(int stage, int mb) { return slots[static_cast<size_t>(stage * m + mb)]; }
};

PipelineRuntime::PipelineRuntime(PipelineSchedule schedule, std::vector<PipelineStage> stages,
                                 std::shared_ptr<dist::ProcessGroup> pp, RuntimeOptions options)
    : schedule_(std::move(schedule)), stages_(std::move(stages)), pp_(std::move(pp)),
      options_(std::move(options)) {
  FSDPP_CHECK(pp_, "[pipeline] the runtime needs the pp process group");
  FSDPP_CHECK_AS(ConfigError, pp_->size() == schedule_.num_ranks,
                 "[pipeline] schedule '{}' is for {} ranks but the pp group has {}",
                 schedule_.name, schedule_.num_ranks, pp_->size());
  verify(schedule_);
  const int rank = pp_->rank();
  const auto mine = schedule_.stages_of(rank);
  std::vector<int> given;
  for (const auto& s : stages_) given.push_back(s.index);
  std::sort(given.begin(), given.end());
  FSDPP_CHECK_AS(ConfigError, given == mine,
                 "[pipeline] rank {} was given stages [{}] but schedule '{}' places stages [{}] "
                 "on it",
                 rank, fmt::join(given, ", "), schedule_.name, fmt::join(mine, ", "));
  local_.assign(static_cast<size_t>(schedule_.num_stages), -1);
  const int last = schedule_.num_stages - 1;
  int num_fsdp = 0;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const auto& s = stages_[i];
    local_[static_cast<size_t>(s.index)] = static_cast<int>(i);
    FSDPP_CHECK(s.module && s.forward, "[pipeline] stage {} has no module or no forward", s.index);
    FSDPP_CHECK_AS(ConfigError, s.index != last || s.loss,
                   "[pipeline] stage {} is the last stage and needs a loss function", s.index);
    if (fsdpp::detail::unit_of(*s.module)) ++num_fsdp;
  }
  fsdp_ = num_fsdp > 0;
  // Messages live where the stages compute (a CUDA device under NCCL): their parameters' device.
  for (const auto& s : stages_) {
    for (const auto& p : s.module->parameters()) device_ = p.device();
  }
  FSDPP_CHECK_AS(ConfigError, num_fsdp == 0 || num_fsdp == static_cast<int>(stages_.size()),
                 "[pipeline] rank {}: {} of its {} stages are fully_shard-ed; shard all or none",
                 rank, num_fsdp, stages_.size());
  if (fsdp_ && options_.keep_gathered) {
    bool has_fsdp_actions = false;
    for (const auto& list : schedule_.actions) {
      for (const auto& a : list) has_fsdp_actions |= is_stage_wide(a.kind);
    }
    if (!has_fsdp_actions) {
      schedule_ = add_fsdp_actions(schedule_);
      verify(schedule_);
    }
  } else if (fsdp_) {
    for (const auto& a : schedule_.actions[static_cast<size_t>(rank)]) {
      // FSDP's hooks finish a unit's backward (reduce, reshard) when I's autograd pass ends,
      // before W has accumulated anything.
      FSDPP_CHECK_AS(ConfigError, a.kind != ActionKind::I && a.kind != ActionKind::W,
                     "[pipeline] schedule '{}' splits backward into I and W, which fully_shard-ed "
                     "stages support only with RuntimeOptions::keep_gathered (parameters held "
                     "gathered, gradients reduced at REDUCE_GRAD)",
                     schedule_.name);
    }
  }
  if (options_.abort_key.empty()) options_.abort_key = "fsdpp/pipeline/" + pp_->name() + "/abort";
  if (options_.store && options_.stall_check_after.count() >= 0) {
    auto after = options_.stall_check_after;
    if (after.count() == 0) after = std::min<std::chrono::milliseconds>(pp_->timeout() / 5, std::chrono::seconds(5));
    stall_ = std::make_unique<StallCheck>(schedule_, rank, options_.store,
                                                  options_.abort_key + "/at", after);
  }
  const auto n = static_cast<size_t>(schedule_.num_stages);
  out_sizes_.assign(n, {});
  out_dtypes_.assign(n, at::kFloat);
  agreed_.assign(n, false);
  last_backward_.assign(n, -1);
  for (const auto& a : schedule_.actions[static_cast<size_t>(rank)]) {
    if (a.kind == ActionKind::B) last_backward_[static_cast<size_t>(a.stage)] = a.microbatch;
  }
}

PipelineRuntime::~PipelineRuntime() = default;

std::vector<at::Tensor> PipelineRuntime::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& s : stages_) {
    for (const auto& p : s.module->parameters()) {
      bool seen = false;
      for (const auto& q : out) seen = seen || q.is_same(p);
      if (!seen) out.push_back(p);
    }
  }
  return out;
}

std::vector<ShardedParam> PipelineRuntime::placed_params(const OuterLayoutOf& layout) const {
  std::vector<ShardedParam> out;
  for (const auto& s : stages_) {
    for (auto& v : fsdpp::placed_params(*s.module, layout, "PipelineRuntime::placed_params")) {
      out.push_back(std::move(v));
    }
  }
  return out;
}

namespace {

int tag_of(const PipelineSchedule& s, int direction, int stage, int mb) {
  return (direction * s.num_stages + stage) * s.num_microbatches + mb;
}
int meta_tag(const PipelineSchedule& s, int stage) {
  return 2 * s.num_stages * s.num_microbatches + stage;
}

}  // namespace

StepOutput PipelineRuntime::step(const at::Tensor& inputs, const at::Tensor& targets,
                                 const MicrobatchLoss& loss_of, const at::Tensor& shared) {
  const int rank = pp_->rank();
  const int m = schedule_.num_microbatches;
  const int last = schedule_.num_stages - 1;
  State st;
  st.m = m;
  st.loss = loss_of;
  st.slots.resize(static_cast<size_t>(schedule_.num_stages * m));
  auto split = [&](const at::Tensor& t, const char* what) {
    FSDPP_CHECK_AS(ConfigError, t.defined() && t.dim() >= 1 && t.size(0) % m == 0 && t.size(0) >= m,
                   "[pipeline] the {} of a step must have a batch dim (0) that divides into {} "
                   "microbatches; got {}",
                   what, m, t.defined() ? sizes_text(t.sizes().vec()) : "an undefined tensor");
    return t.split(t.size(0) / m);
  };
  pp_->barrier({"pipeline step"});
  ++steps_;
  st.t0 = Clock::now();
  st.last_abort_check = st.t0;
  timings_ = MeasuredRank{};
  if (options_.memory_probe) {
    timings_.start_bytes = options_.memory_probe();
    timings_.peak_bytes_above_start = 0;
  }
  const auto& list = schedule_.actions[static_cast<size_t>(rank)];
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - st.t0).count();
  };
  size_t i = list.size() + 1;  // none yet: the batch is being split
  try {
    if (local_[0] >= 0) st.inputs = split(inputs, "inputs");
    if (shared.defined()) {
      for (const auto& s : stages_) {
        FSDPP_CHECK_AS(ConfigError, static_cast<bool>(s.forward_shared),
                       "[pipeline] the step has rows shared by every stage but stage {} has no "
                       "forward_shared to take them",
                       s.index);
      }
      st.shared = split(shared, "shared rows");
    }
    if (local_[static_cast<size_t>(last)] >= 0) {
      st.targets = split(targets, "targets");
      st.losses.assign(static_cast<size_t>(m), 0.0);
    }
    if (options_.post_recvs_early) post_recvs(st);
    for (i = 0; i < list.size(); ++i) {
      const auto begin = Clock::now();
      run_action(i, list[i], st);
      const auto end = Clock::now();
      timings_.actions.push_back({list[i], ms(begin), ms(end)});
      if (is_compute(list[i].kind)) timings_.busy_ms += ms(end) - ms(begin);
      if (options_.memory_probe) {
        // Read after the clock stops, so the probe's own cost is not in the action's time.
        const int64_t now = options_.memory_probe();
        timings_.actions.back().bytes = now;
        timings_.peak_bytes_above_start =
            std::max(timings_.peak_bytes_above_start, now - timings_.start_bytes);
      }
    }
    // Sends complete when their recv has taken them.
    for (auto& [work, tensor] : st.sends) wait(work, list.size(), list.empty() ? Action{} : list.back(), st);
    timings_.end_ms = ms(Clock::now());
  } catch (const StoppedByPeer&) {
    throw;
  } catch (const std::exception& e) {
    fail(i, i < list.size() ? list[i] : Action{}, e.what());
  }
  // The loss, from the rank of the last stage to every rank.
  auto loss = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  StepOutput out;
  if (local_[static_cast<size_t>(last)] >= 0) {
    double sum = 0;
    for (double l : st.losses) sum += l;
    loss.fill_(sum / m);
    out.microbatch_losses = st.losses;
  }
  pp_->broadcast(loss, schedule_.rank_of(last), {"pipeline loss"});
  out.loss = loss.item<double>();
  return out;
}

void PipelineRuntime::fail(size_t index, const Action& a, const std::string& what) {
  const int rank = pp_->rank();
  const auto& list = schedule_.actions[static_cast<size_t>(rank)];
  std::string msg =
      index < list.size()
          ? fmt::format("[pipeline] stage {} (rank {}) failed at action {} ({}) of schedule "
                        "'{}': {}",
                        a.stage, rank, index, describe(a), schedule_.name, what)
          : fmt::format("[pipeline] rank {} failed {} of schedule '{}': {}", rank,
                        index == list.size() ? "waiting for its sends" : "before its first action",
                        schedule_.name, what);
  if (options_.store) {
    try {
      options_.store->set(options_.abort_key, std::vector<uint8_t>(msg.begin(), msg.end()));
    } catch (...) {
      // The store is gone too: the others stop at their timeout.
    }
  }
  throw Error(msg);
}

void PipelineRuntime::wait(dist::Work& work, size_t index, const Action& a, State& st) {
  int polls = 0;
  const auto since = Clock::now();
  struct Withdraw {  // a position published by the stall check ends with the wait, however
    StallCheck* check;
    ~Withdraw() {
      if (check) check->done();
    }
  } withdraw{stall_.get()};
  while (!work.is_completed()) {
    const auto now = Clock::now();
    if (stall_) {
      if (auto finding = stall_->waiting(steps_, index, since)) throw Error(*finding);
    }
    if (options_.store && now - st.last_abort_check >= options_.poll_interval) {
      st.last_abort_check = now;
      if (options_.store->check({options_.abort_key})) {
        const auto v = options_.store->get(options_.abort_key);
        throw StoppedByPeer(fmt::format("[pipeline] rank {} stopped at {} because {}",
                                        pp_->rank(), describe(a), std::string(v.begin(), v.end())));
      }
    }
    // Short sleeps first (a message is usually a few tens of microseconds away), then longer
    // ones, so that a waiting rank does not take the CPU from the ranks computing.
    std::this_thread::sleep_for(std::chrono::microseconds(++polls < 250 ? 10 : 100));
  }
  work.wait();  // rethrows the recv's or send's error
}

// Every recv of the step posted at its start, in the order of the list, so that a message is
// taken as soon as it is sent and a RECV action waits only for data that is not there yet.
// Needs every shape: from the second step on (the first agrees on them as it goes).
void PipelineRuntime::post_recvs(State& st) {
  const auto& list = schedule_.actions[static_cast<size_t>(pp_->rank())];
  for (const auto& a : list) {
    const int from = a.kind == ActionKind::RECV_F ? a.stage - 1 : a.stage;
    if (is_recv(a.kind) && !agreed_[static_cast<size_t>(from)]) return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& a = list[i];
    if (!is_recv(a.kind)) continue;
    const bool fwd = a.kind == ActionKind::RECV_F;
    const int from = fwd ? a.stage - 1 : a.stage;  // whose output it is (or its gradient)
    auto t = at::empty(out_sizes_[static_cast<size_t>(from)],
                       at::TensorOptions().dtype(out_dtypes_[static_cast<size_t>(from)]).device(device_));
    const int peer = schedule_.rank_of(fwd ? a.stage - 1 : a.stage + 1);
    const int tag = fwd ? tag_of(schedule_, 0, a.stage - 1, a.microbatch)
                        : tag_of(schedule_, 1, a.stage + 1, a.microbatch);
    auto w = pp_->recv_async(t, peer, tag,
                             {fwd ? fmt::format("stage {} activation", a.stage - 1)
                                  : fmt::format("stage {} input gradient", a.stage + 1)});
    st.posted.emplace(i, std::make_pair(std::move(w), t));
  }
}

void PipelineRuntime::run_action(size_t index, const Action& a, State& st) {
  const int m = schedule_.num_microbatches;
  const int last = schedule_.num_stages - 1;
  const int s = a.stage;
  const int li = local_[static_cast<size_t>(s)];
  FSDPP_CHECK(li >= 0, "[pipeline] stage {} does not live on rank {}", s, pp_->rank());
  PipelineStage& stage = stages_[static_cast<size_t>(li)];
  auto& slot = a.microbatch >= 0 ? st.at(s, a.microbatch) : st.slots.front();
  const int mb = a.microbatch;

  auto hand_back = [&](at::Tensor in_grad) {
    // The input gradient goes to the previous stage: by message, or here if it lives here.
    if (s > 0 && local_[static_cast<size_t>(s - 1)] >= 0) {
      st.at(s - 1, mb).out_grad = std::move(in_grad);
    } else {
      slot.in_grad = std::move(in_grad);
    }
  };
  auto grad_seed = [&]() {
    if (s == last) return at::full({}, 1.0 / m, slot.output.options());
    FSDPP_CHECK(slot.out_grad.defined(), "[pipeline] the output gradient has not arrived");
    return slot.out_grad;
  };

  switch (a.kind) {
    case ActionKind::F: {
      at::Tensor x;
      if (s == 0) {
        x = st.inputs.at(static_cast<size_t>(mb));
      } else if (local_[static_cast<size_t>(s - 1)] >= 0) {
        x = st.at(s - 1, mb).output.detach();
      } else {
        x = slot.received;
        slot.received = at::Tensor();
      }
      FSDPP_CHECK(x.defined(), "[pipeline] the input has not arrived");
      if (s > 0 && x.is_floating_point()) x = x.detach().requires_grad_(true);
      slot.input = x;
      at::Tensor y = st.shared.empty()
                         ? stage.forward(x)
                         : stage.forward_shared(x, st.shared.at(static_cast<size_t>(mb)));
      if (s == last) {
        const auto& t = st.targets.at(static_cast<size_t>(mb));
        y = st.loss ? st.loss(y, t, mb) : stage.loss(y, t);
        FSDPP_CHECK(y.numel() == 1, "[pipeline] the loss function returned {} elements; expected "
                    "one (the microbatch's mean loss)", y.numel());
        st.losses[static_cast<size_t>(mb)] = y.item<double>();
      }
      slot.output = y;
      break;
    }
    case ActionKind::SEND_F: {
      auto t = slot.output.detach().contiguous();
      const int peer = schedule_.rank_of(s + 1);
      const auto sizes = t.sizes().vec();
      if (!agreed_[static_cast<size_t>(s)]) {
        FSDPP_CHECK(static_cast<int>(sizes.size()) <= kMaxDims,
                    "[pipeline] stage {} outputs {} dims; at most {} cross between stages", s,
                    sizes.size(), kMaxDims);
        auto meta = at::full({kMaxDims + 2}, -1, at::kLong);
        meta[0] = static_cast<int64_t>(sizes.size());
        meta[1] = static_cast<int64_t>(t.scalar_type());
        for (size_t d = 0; d < sizes.size(); ++d) meta[static_cast<int64_t>(d) + 2] = sizes[d];
        meta = meta.to(device_);
        st.sends.emplace_back(pp_->send_async(meta, peer, meta_tag(schedule_, s),
                                              {fmt::format("stage {} output shape", s)}),
                              meta);
        out_sizes_[static_cast<size_t>(s)] = sizes;
        out_dtypes_[static_cast<size_t>(s)] = t.scalar_type();
        agreed_[static_cast<size_t>(s)] = true;
      }
      FSDPP_CHECK(sizes == out_sizes_[static_cast<size_t>(s)] &&
                      t.scalar_type() == out_dtypes_[static_cast<size_t>(s)],
                  "[pipeline] stage {} output {} {} for microbatch {}; stage {} on rank {} agreed "
                  "to receive {} {} (shapes are agreed once, at the first step)",
                  s, sizes_text(sizes), c10::toString(t.scalar_type()), mb, s + 1, peer,
                  sizes_text(out_sizes_[static_cast<size_t>(s)]),
                  c10::toString(out_dtypes_[static_cast<size_t>(s)]));
      st.sends.emplace_back(pp_->send_async(t, peer, tag_of(schedule_, 0, s, mb),
                                            {fmt::format("stage {} activation", s)}),
                            t);
      break;
    }
    case ActionKind::RECV_F: {
      if (auto it = st.posted.find(index); it != st.posted.end()) {
        wait(it->second.first, index, a, st);
        slot.received = it->second.second;
        st.posted.erase(it);
        break;
      }
      const int prev = s - 1;
      const int peer = schedule_.rank_of(prev);
      if (!agreed_[static_cast<size_t>(prev)]) {
        auto meta = at::empty({kMaxDims + 2}, at::TensorOptions().dtype(at::kLong).device(device_));
        auto w = pp_->recv_async(meta, peer, meta_tag(schedule_, prev),
                                 {fmt::format("stage {} output shape", prev)});
        wait(w, index, a, st);
        meta = meta.cpu();
        const auto n = meta[0].item<int64_t>();
        std::vector<int64_t> sizes;
        for (int64_t d = 0; d < n; ++d) sizes.push_back(meta[d + 2].item<int64_t>());
        const auto dtype = static_cast<at::ScalarType>(meta[1].item<int64_t>());
        if (stage.input_spec) {
          FSDPP_CHECK_AS(ConfigError, matches(*stage.input_spec, sizes, dtype),
                         "[pipeline] stage {} (rank {}) outputs {} {} but stage {} (rank {}) "
                         "expects {}; no activation was sent",
                         prev, peer, sizes_text(sizes), c10::toString(dtype), s, pp_->rank(),
                         spec_text(*stage.input_spec));
        }
        out_sizes_[static_cast<size_t>(prev)] = sizes;
        out_dtypes_[static_cast<size_t>(prev)] = dtype;
        agreed_[static_cast<size_t>(prev)] = true;
      }
      auto t = at::empty(out_sizes_[static_cast<size_t>(prev)],
                         at::TensorOptions().dtype(out_dtypes_[static_cast<size_t>(prev)]).device(device_));
      auto w = pp_->recv_async(t, peer, tag_of(schedule_, 0, prev, mb),
                               {fmt::format("stage {} activation", prev)});
      wait(w, index, a, st);
      slot.received = t;
      break;
    }
    case ActionKind::B: {
      if (fsdp_ && !options_.keep_gathered) {
        // Gradients are reduce-scattered once, at the stage's last backward of the step.
        const bool last_b = last_backward_[static_cast<size_t>(s)] == mb;
        set_requires_gradient_sync(*stage.module, options_.reduce_grad_every_microbatch || last_b);
      }
      const auto g = grad_seed();
      at::Tensor in_grad;
      if (slot.input.requires_grad()) {
        torch::autograd::backward({slot.output}, {g});
        in_grad = slot.input.grad();
      } else {
        torch::autograd::backward({slot.output}, {g});
      }
      slot.output = at::Tensor();
      slot.input = at::Tensor();
      slot.out_grad = at::Tensor();
      if (in_grad.defined()) hand_back(std::move(in_grad));
      if (fsdp_ && options_.keep_gathered && options_.reduce_grad_every_microbatch) {
        fsdpp::reduce_gradients(*stage.module);
      }
      break;
    }
    case ActionKind::I: {
      std::vector<at::Tensor> params;
      for (const auto& p : stage.module->parameters()) params.push_back(p);
      slot.split = std::make_unique<detail::SplitBackward>(slot.output, grad_seed(), slot.input,
                                                           std::move(params));
      auto in_grad = slot.split->backward_input();
      slot.output = at::Tensor();
      slot.input = at::Tensor();
      slot.out_grad = at::Tensor();
      if (in_grad.defined()) hand_back(std::move(in_grad));
      break;
    }
    case ActionKind::W: {
      FSDPP_CHECK(slot.split, "[pipeline] W before I");
      slot.split->backward_weight();
      slot.split.reset();
      if (fsdp_ && options_.reduce_grad_every_microbatch) fsdpp::reduce_gradients(*stage.module);
      break;
    }
    case ActionKind::SEND_B: {
      FSDPP_CHECK(slot.in_grad.defined(), "[pipeline] no input gradient to send");
      auto t = slot.in_grad.contiguous();
      slot.in_grad = at::Tensor();
      st.sends.emplace_back(pp_->send_async(t, schedule_.rank_of(s - 1), tag_of(schedule_, 1, s, mb),
                                            {fmt::format("stage {} input gradient", s)}),
                            t);
      break;
    }
    case ActionKind::RECV_B: {
      if (auto it = st.posted.find(index); it != st.posted.end()) {
        wait(it->second.first, index, a, st);
        slot.out_grad = it->second.second;
        st.posted.erase(it);
        break;
      }
      const auto& like = out_sizes_[static_cast<size_t>(s)];
      auto t = at::empty(like, at::TensorOptions().dtype(out_dtypes_[static_cast<size_t>(s)]).device(device_));
      auto w = pp_->recv_async(t, schedule_.rank_of(s + 1), tag_of(schedule_, 1, s + 1, mb),
                               {fmt::format("stage {} input gradient", s + 1)});
      wait(w, index, a, st);
      slot.out_grad = t;
      break;
    }
    // Without keep_gathered (or stages that are not fully_shard-ed) fully_shard's hooks gather
    // in forward and backward and reduce at the end of the stage's last backward (sync switched
    // on for it in B), and these do nothing.
    case ActionKind::UNSHARD:
      if (fsdp_ && options_.keep_gathered) fsdpp::unshard(*stage.module);
      break;
    case ActionKind::REDUCE_GRAD:
      if (fsdp_ && options_.keep_gathered && !options_.reduce_grad_every_microbatch) {
        fsdpp::reduce_gradients(*stage.module);
      }
      break;
    case ActionKind::RESHARD:
      if (fsdp_ && options_.keep_gathered) fsdpp::reshard(*stage.module);
      break;
  }
}

}  // namespace fsdpp::pipeline
