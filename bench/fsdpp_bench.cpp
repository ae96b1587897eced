// fsdpp-bench: the fsdpp side of `make bench` (bench/run_bench.py drives it; see docs/benchmarks.md).
//
//   fsdpp-bench init        --dir D                 writes D/init.safetensors: the initial weights
//                                                   of the model in D/config.json
//   fsdpp-bench train       --dir D --strategy S    trains that model from those weights on the
//                           --steps N --warmup W    batches of D/batches.safetensors, times every
//                           --out F [--no-fsdp]     step; --no-fsdp: each rank trains its own
//                                                   unsharded copy with no communication (T_compute)
//                           [--tp K [--sp]]         tensor parallel: the Llama plan over groups
//                                                   of K ranks, FSDP over the rest (dp_shard)
//                           [--bf16] [--ac]         bf16 parameters and compute (fp32 reduce and
//                           [--fused]               master weights); activation checkpointing of
//                                                   every block; the fused AdamW. The model runs
//                                                   on the rank's device (a GPU when one is
//                                                   visible: bench/gpu_bench.py, docs/gpus.md)
//                           [--profile F]           records the timed steps with PyTorch's
//                                                   profiler (Kineto: CPU ops and CUDA kernels)
//                                                   into the Chrome trace F (rank 0), as
//                                                   torch.profiler does (bench/gpu_profile.py)
//   fsdpp-bench collectives --dir D --strategy S    replays one step's collectives (the units'
//                           --repeats R --out F     sizes, standalone) and the copies around them
//   fsdpp-bench baseline    --out F                 the runtime's own memory: a LibTorch + Gloo
//                                                   process that trains a tiny model for two steps
//
// Start train / collectives / baseline under fsdpp-run; rank 0 writes F (JSON).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <malloc.h>

#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/dist/world.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/float8_convert.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/optim/fused_adamw.h"
#include "fsdpp/state/safetensors.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// CPU time of the whole process (every thread: the caller, fsdpp's communication thread,
// Gloo's), in ms: how much of a collective's wall time is work a core must do.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// VmHWM (peak) or VmRSS (now) of this process, in MiB.
double proc_status_mb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(k, 0) == 0) return std::stod(line.substr(k.size())) / 1024.0;
  }
  return 0;
}

// Bytes this process has written with write()/writev() since it started, sockets included: Gloo's
// TCP transport sends that way, so the difference over a step is what went on the wire.
double io_wchar() {
  std::ifstream in("/proc/self/io");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("wchar:", 0) == 0) return std::stod(line.substr(6));
  }
  return 0;
}

// Counts the bytes of every live CPU tensor of the process (any thread), for --count-alloc: the
// peak of live tensor bytes, to tell what the model's tensors need from what the C library's
// allocator keeps on top of them (RSS).
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    auto inner = base_->allocate(n);
    auto* ctx = new Ctx{std::move(inner), static_cast<int64_t>(n), this};
    const int64_t now = live_.fetch_add(ctx->n) + ctx->n;
    int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
    return {ctx->inner.get(), ctx, &CountingAllocator::release, ctx->inner.device()};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  int64_t peak() const { return peak_.load(); }
  int64_t live() const { return live_.load(); }

 private:
  struct Ctx {
    c10::DataPtr inner;
    int64_t n;
    CountingAllocator* owner;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Ctx*>(p);
    ctx->owner->live_.fetch_sub(ctx->n);
    delete ctx;
  }
  c10::Allocator* base_;
  std::atomic<int64_t> live_{0}, peak_{0};
};

// With FSDPP_BENCH_TRACE set (and --count-alloc): memory at a point of the run, on rank 0.
void trace_memory(const char* where, int64_t live, int64_t peak) {
  if (!std::getenv("FSDPP_BENCH_TRACE")) return;
  const auto mi = mallinfo2();
  std::printf("[trace] %-18s live %8.1f MiB  peak live %8.1f  VmRSS %8.1f  VmHWM %8.1f  heap %8.1f in use %8.1f "
              "free %8.1f mmapped %8.1f\n",
              where, live / 1048576.0, peak / 1048576.0, proc_status_mb("VmRSS"), proc_status_mb("VmHWM"),
              mi.arena / 1048576.0, mi.uordblks / 1048576.0, mi.fordblks / 1048576.0, mi.hblkhd / 1048576.0);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[bench] cannot read '{}'", path);
  return json::parse(in);
}

void write_json(const std::string& path, const json& j) {
  std::ofstream out(path);
  FSDPP_CHECK(out.good(), "[bench] cannot write '{}'", path);
  out << j.dump(1) << "\n";
}

fsdpp::models::LlamaConfig llama_config(const json& m) {
  fsdpp::models::LlamaConfig c;
  c.vocab_size = m.at("vocab_size");
  c.dim = m.at("dim");
  c.n_layers = m.at("n_layers");
  c.n_heads = m.at("n_heads");
  c.n_kv_heads = m.value("n_kv_heads", 0);
  c.ffn_hidden = m.value("ffn_hidden", 0);
  c.multiple_of = m.value("multiple_of", 32);
  c.max_seq_len = m.at("max_seq_len");
  c.norm_eps = m.value("norm_eps", 1e-5);
  c.rope_theta = m.value("rope_theta", 10000.0);
  c.tie_embeddings = m.value("tie_embeddings", false);
  c.seed = m.value("seed", 0);
  c.validate();
  return c;
}

// The same values the other side loads: every parameter from the file, by name.
void load_weights(fsdpp::models::Llama& model, const std::string& path) {
  auto file = fsdpp::state::SafetensorsFile::open(path);
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters();
  for (auto& p : params) {
    FSDPP_CHECK(file.contains(p.key()), "[bench] '{}' has no tensor '{}'", path, p.key());
    auto t = file.get(p.key());
    FSDPP_CHECK(t.sizes() == p.value().sizes(), "[bench] '{}' in '{}' has shape {}; the model's is {}",
                p.key(), path, t.sizes(), p.value().sizes());
    p.value().copy_(t);
  }
  FSDPP_CHECK(file.names().size() == params.size(), "[bench] '{}' holds {} tensors; the model has {} parameters",
              path, file.names().size(), params.size());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One value per rank, on every rank.
std::vector<double> gather_doubles(fsdpp::dist::World& world, double value) {
  auto in = torch::tensor({value}, torch::kDouble);
  auto out = torch::empty({world.size()}, torch::kDouble);
  world.group()->all_gather_into_tensor(out, in, {"bench"});
  return std::vector<double>(out.data_ptr<double>(), out.data_ptr<double>() + world.size());
}

json counters_json(const fsdpp::dist::CommCounters& c, double per) {
  json j;
  for (int k = 0; k < fsdpp::dist::kNumCollectives; ++k) {
    const auto kind = static_cast<fsdpp::dist::Collective>(k);
    if (c.calls_of(kind) == 0) continue;
    j[fsdpp::dist::to_string(kind)] = {{"bytes", c.bytes_of(kind) / per}, {"calls", c.calls_of(kind) / per}};
  }
  return j;
}

// Tensor parallelism of the fsdpp side (docs/tensor-parallel.md): the (dp_shard, tp) mesh, TP
// innermost, the Llama plan, then FSDP over "shard" (torchtitan's order).
struct Parallel {
  int tp = 1;
  bool sp = false;
  std::shared_ptr<fsdpp::dist::DeviceMesh> mesh;  // set by build_model when tp > 1
  std::optional<fsdpp::tp::TensorParallel> plan;
};

// Prefetch settings of the fsdpp side (FullyShardOptions' defaults unless given).
struct Prefetch {
  int forward = fsdpp::FullyShardOptions{}.forward_prefetch;
  std::string backward = fsdpp::to_string(fsdpp::FullyShardOptions{}.backward_prefetch);
  int64_t reduce_bucket_size = fsdpp::FullyShardOptions{}.reduce_bucket_size;
  // The root and the last block keep their parameters from forward to backward (torchtitan's
  // layout; FSDP2 keeps the root by default).
  bool keep_ends = false;
  bool bf16 = false;  // bf16 parameters and compute, fp32 reduction
  bool ac = false;    // activation checkpointing of every TransformerBlock
  bool ac_selective = false;  // with ac: selective, the projections' products kept
  std::string fp8 = "off";  // float8 GEMMs: off, tensorwise or rowwise (torchao's auto filter)
};

fsdpp::models::Llama build_model(const json& cfg, const std::string& dir, fsdpp::dist::World& world,
                                 const std::string& strategy, const Prefetch& prefetch, bool shard,
                                 json* units_out,
                                 int64_t* total_params = nullptr,
                                 const std::function<void(const char*)>& trace = {},
                                 Parallel* parallel = nullptr) {
  fsdpp::models::Llama model(llama_config(cfg.at("model")));
  if (trace) trace("model built");
  load_weights(model, dir + "/init.safetensors");
  if (trace) trace("weights loaded");
  if (total_params) *total_params = fsdpp::models::num_parameters(*model);
  if (!world.device().is_cpu()) model->to(world.device());
  if (prefetch.fp8 != "off") {
    const auto recipe = prefetch.fp8 == "rowwise" ? fsdpp::Float8Recipe::ROWWISE : fsdpp::Float8Recipe::TENSORWISE;
    const auto converted = fsdpp::models::convert_to_float8(*model, {recipe, fsdpp::Float8Filter::AUTO});
    if (world.rank() == 0) fmt::print("[bench] float8 {}: {} projections\n", prefetch.fp8, converted.size());
  }
  if (prefetch.ac) {
    fsdpp::apply_activation_checkpointing(*model, {"TransformerBlock"}, 1,
                                          {.keep_products = prefetch.ac_selective});
  }
  if (!shard) return model;
  fsdpp::FullyShardOptions opts;
  opts.mesh = world.mesh();
  if (parallel && parallel->tp > 1) {
    FSDPP_CHECK_AS(ConfigError, world.size() % parallel->tp == 0, "[bench] --tp {} does not divide {} ranks",
                   parallel->tp, world.size());
    parallel->mesh = world.init_device_mesh({world.size() / parallel->tp, parallel->tp}, {"shard", "tp"});
    parallel->plan = fsdpp::models::parallelize_llama(*model, parallel->mesh->group("tp"),
                                                      {.sequence_parallel = parallel->sp});
    opts.mesh = parallel->mesh->sub({"shard"});
    opts.outer_layout = parallel->plan->outer_layout(*model);
  }
  opts.strategy = fsdpp::parse_sharding_strategy(strategy);
  opts.forward_prefetch = prefetch.forward;
  opts.backward_prefetch = fsdpp::parse_backward_prefetch(prefetch.backward);
  opts.reduce_bucket_size = prefetch.reduce_bucket_size;
  if (prefetch.bf16) {
    opts.mp_policy.param_dtype = at::kBFloat16;
    opts.mp_policy.reduce_dtype = at::kFloat;
  }
  const auto made =
      fsdpp::apply_fully_shard(*model, fsdpp::transformer_layer_policy({"TransformerBlock"}), opts);
  if (prefetch.keep_ends) fsdpp::keep_ends_gathered(*model, made);
  if (units_out) {
    for (const auto& u : fsdpp::inspect_units(*model)) {
      units_out->push_back({{"name", u.name}, {"numel", u.numel}, {"shard_numel", u.shard_numel},
                            {"shard_world", u.shard_world}});
    }
  }
  return model;
}

int cmd_init(const std::string& dir) {
  const json cfg = read_json(dir + "/config.json");
  fsdpp::models::Llama model(llama_config(cfg.at("model")));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : model->named_parameters()) tensors.emplace_back(p.key(), p.value().detach());
  fsdpp::state::save_safetensors(dir + "/init.safetensors", tensors, {{"format", "pt"}});
  std::printf("[bench] wrote %s/init.safetensors: %lld parameters\n", dir.c_str(),
              static_cast<long long>(fsdpp::models::num_parameters(*model)));
  return 0;
}

int cmd_train(const std::string& dir, const std::string& strategy, const Prefetch& prefetch, int steps,
              int warmup, const std::string& out_path, bool no_fsdp, bool count_alloc, Parallel& parallel,
              int64_t local_batch, bool fused, const std::string& profile) {
  // Installed before anything is allocated, so that every tensor is counted (and freed through
  // the allocator that made it); it outlives every tensor of this function.
  static CountingAllocator counting(c10::GetCPUAllocator());
  if (count_alloc) c10::SetCPUAllocator(&counting, /*priority=*/100);
  fsdpp::dist::InitOptions init;
  init.num_threads = 1;
  auto world = fsdpp::dist::init_from_env(init);
  at::set_num_threads(1);
  const json cfg = read_json(dir + "/config.json");
  const int64_t B = local_batch > 0 ? local_batch : cfg.at("local_batch").get<int64_t>(), T = cfg.at("seq_len");
  // The batches the PyTorch side reads too; without the file (tests), seeded random tokens.
  at::Tensor batches;
  if (std::filesystem::exists(dir + "/batches.safetensors")) {
    batches = fsdpp::state::SafetensorsFile::open(dir + "/batches.safetensors").get("tokens");
  } else {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
    batches = torch::randint(cfg.at("model").at("vocab_size").get<int64_t>(), {4, B * world->size(), T + 1}, gen);
  }
  const int64_t n_batches = batches.size(0);
  // The ranks of a tp group read the same rows: one part of the batch per data-parallel rank.
  const int dp_rank = world->rank() / parallel.tp;
  FSDPP_CHECK_AS(ConfigError, batches.size(1) >= B * (world->size() / parallel.tp) && batches.size(2) == T + 1,
                 "[bench] batches of shape {} cannot feed {} ranks x {} sequences of {}+1 tokens",
                 batches.sizes(), world->size(), B, T);

  const double baseline_rss = proc_status_mb("VmHWM");
  json units = json::array();
  int64_t n_params = 0;
  if (count_alloc && world->rank() == 0) trace_memory("before the model", counting.live(), counting.peak());
  auto model = build_model(cfg, dir, *world, strategy, prefetch, !no_fsdp, &units, &n_params, [&](const char* where) {
    if (count_alloc && world->rank() == 0) trace_memory(where, counting.live(), counting.peak());
  }, &parallel);
  if (count_alloc && world->rank() == 0) trace_memory("model sharded", counting.live(), counting.peak());
  const auto betas = cfg.value("betas", std::vector<double>{0.9, 0.95});
  const auto adamw = torch::optim::AdamWOptions(cfg.value("lr", 1e-3))
                         .betas({betas.at(0), betas.at(1)})
                         .eps(cfg.value("eps", 1e-8))
                         .weight_decay(cfg.value("weight_decay", 0.1));
  std::unique_ptr<torch::optim::AdamW> opt_ptr =
      fused ? std::make_unique<fsdpp::optim::FusedAdamW>(model->parameters(), adamw)
            : std::make_unique<torch::optim::AdamW>(model->parameters(), adamw);
  auto& opt = *opt_ptr;
  // On a GPU the step is timed to the device's end (the stream synchronised: no CPU waits
  // inside it), and the caching allocator's peak is what memory means.
  const c10::Device device = world->device();
  const auto sync = [&] { fsdpp::dist::Stream::current(device).synchronize(); };
  sync();
  fsdpp::dist::reset_peak_memory(device);

  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms, losses, wire, rss_by_step;
  fsdpp::dist::CommCounters comm{}, comm_tp{};
  auto tp_counters = [&] { return parallel.mesh ? parallel.mesh->counters("tp") : fsdpp::dist::CommCounters{}; };
  // The timed steps under PyTorch's profiler on rank 0 (CPU ops and, on a GPU, its kernels).
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig profiler(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  const bool profiling = !profile.empty() && world->rank() == 0;
  if (profiling) prof::prepareProfiler(profiler, activities);
  for (int step = 0; step < warmup + steps; ++step) {
    if (profiling && step == warmup) prof::enableProfiler(profiler, activities);
    RECORD_USER_SCOPE("fsdpp-bench step");
    auto rows = batches[step % n_batches].narrow(0, dp_rank * B, B);  // (B, T+1)
    auto x = rows.narrow(1, 0, T).contiguous().to(device), y = rows.narrow(1, 1, T).contiguous().to(device);
    sync();
    const auto before = no_fsdp ? fsdpp::dist::CommCounters{} : fsdpp::comm_counters(*model);
    const auto tp_before = tp_counters();
    const double w0 = io_wchar();
    const auto t0 = Clock::now();
    auto out = fsdpp::forward(model, x, y);
    const double t_fwd = ms_since(t0);
    auto trace = [&](const char* where) {
      if (count_alloc && world->rank() == 0)
        trace_memory(fmt::format("step {} {}", step, where).c_str(), counting.live(), counting.peak());
    };
    trace("forward");
    const auto t1 = Clock::now();
    out.loss.backward();
    trace("backward");
    const double t_bwd = ms_since(t1);
    const auto t2 = Clock::now();
    opt.step();
    opt.zero_grad();
    sync();
    const double t_opt = ms_since(t2);
    trace("optimizer");
    const double t_step = ms_since(t0);
    const double w1 = io_wchar();
    const auto comm_step = no_fsdp ? fsdpp::dist::CommCounters{} : fsdpp::comm_counters(*model) - before;
    const auto comm_tp_step = tp_counters() - tp_before;
    // Outside the timed step, as on the PyTorch side: the global loss (one 8-byte all-reduce).
    auto loss = out.loss.detach().to(torch::kDouble).reshape({1});
    if (!no_fsdp) world->group()->all_reduce(loss, fsdpp::dist::ReduceOp::AVG, {"bench"});
    losses.push_back(loss.item<double>());
    rss_by_step.push_back(proc_status_mb("VmHWM"));
    if (step >= warmup) {
      step_ms.push_back(t_step);
      fwd_ms.push_back(t_fwd);
      bwd_ms.push_back(t_bwd);
      opt_ms.push_back(t_opt);
      wire.push_back(w1 - w0);
      for (int k = 0; k < fsdpp::dist::kNumCollectives; ++k) {
        comm.bytes[k] += comm_step.bytes[k];
        comm.calls[k] += comm_step.calls[k];
        comm_tp.bytes[k] += comm_tp_step.bytes[k];
        comm_tp.calls[k] += comm_tp_step.calls[k];
      }
    }
  }
  if (profiling) prof::disableProfiler()->save(profile);
  const auto peak = gather_doubles(*world, proc_status_mb("VmHWM"));
  const auto base = gather_doubles(*world, baseline_rss);
  const auto tensor_peak = gather_doubles(*world, counting.peak() / 1048576.0);
  // Every rank's step time: the step of the slowest rank is the step.
  const auto step_max = gather_doubles(*world, median(step_ms));
  if (world->rank() == 0) {
    json j;
    j["impl"] = no_fsdp ? "fsdpp-compute" : "fsdpp";
    j["strategy"] = no_fsdp ? "none" : strategy;
    j["forward_prefetch"] = prefetch.forward;
    j["backward_prefetch"] = prefetch.backward;
    j["reduce_bucket_size"] = prefetch.reduce_bucket_size;
    j["keep_ends"] = prefetch.keep_ends;
    j["world_size"] = world->size();
    j["tensor_parallel"] = parallel.tp;
    j["sequence_parallel"] = parallel.sp;
    j["num_params"] = n_params;
    j["local_batch"] = B;
    j["seq_len"] = T;
    j["warmup"] = warmup;
    j["step_ms"] = step_ms;
    j["median_step_ms"] = median(step_ms);
    j["median_step_ms_per_rank"] = step_max;
    j["phase_ms"] = {{"forward", median(fwd_ms)}, {"backward", median(bwd_ms)}, {"optimizer", median(opt_ms)}};
    j["losses"] = losses;
    j["final_loss"] = losses.back();
    j["peak_rss_mb"] = peak;
    j["baseline_rss_mb"] = base;
    j["rank0_peak_rss_mb_after_step"] = rss_by_step;
    if (count_alloc) j["peak_tensor_mb"] = tensor_peak;
    j["comm_per_step"] = counters_json(comm, std::max(1, steps));
    j["comm_bytes_per_step"] = static_cast<double>(comm.total_bytes()) / std::max(1, steps);
    j["wire_bytes_per_step"] = median(wire);
    // Tensor parallelism's own traffic on the tp dim (comm_bytes_per_step is FSDP's).
    j["comm_tp_per_step"] = counters_json(comm_tp, std::max(1, steps));
    j["comm_bytes_tp_per_step"] = static_cast<double>(comm_tp.total_bytes()) / std::max(1, steps);
    j["units"] = units;
    j["threads"] = at::get_num_threads();
    j["device"] = device.str();
    j["bf16"] = prefetch.bf16;
    j["activation_checkpointing"] = prefetch.ac;
    j["activation_checkpointing_selective"] = prefetch.ac && prefetch.ac_selective;
    j["fp8"] = prefetch.fp8;
    j["fused_adamw"] = fused;
    if (fsdpp::dist::has_device_memory(device)) {
      const auto m = fsdpp::dist::device_memory(device);
      j["cuda_peak_allocated_mb"] = m.peak_allocated / 1048576.0;
      j["cuda_peak_reserved_mb"] = m.peak_reserved / 1048576.0;
      j["cuda_total_mb"] = m.total / 1048576.0;
    }
    write_json(out_path, j);
  }
  world->group()->barrier({"bench"});
  return 0;
}

// The collectives one step issues, by unit, without the compute around them: what the same
// bytes cost on an idle machine. Also times the copies fsdpp does around them (gathered rows
// into parameters, gradients into the reduce-scatter input) with the same tensor ops.
int cmd_collectives(const std::string& dir, const std::string& strategy, int repeats,
                    const Prefetch& layout, const std::string& out_path) {
  fsdpp::dist::InitOptions init;
  init.num_threads = 1;
  auto world = fsdpp::dist::init_from_env(init);
  at::set_num_threads(1);
  const json cfg = read_json(dir + "/config.json");
  json units = json::array();
  auto model = build_model(cfg, dir, *world, strategy, layout, true, &units);
  const auto s = fsdpp::parse_sharding_strategy(strategy);
  const int N = world->size();
  auto& pg = *world->group();
  // FULL_SHARD gathers every unit in forward and again in backward; SHARD_GRAD_OP once.
  // With --keep-ends the root and the last block skip the backward one.
  const int gathers = s == fsdpp::ShardingStrategy::FULL_SHARD ? 2
                      : s == fsdpp::ShardingStrategy::NO_SHARD ? 0
                                                               : 1;
  const std::string last_block = "layers." + std::to_string(model->layers->size() - 1);
  auto gathers_of = [&](const std::string& unit) {
    const bool kept = layout.keep_ends && (unit == "(root)" || unit == last_block);
    return gathers == 2 && kept ? 1 : gathers;
  };
  std::vector<double> t_ag, t_rs, t_ar, t_copy, cpu_comm;
  pg.reset_counters();
  for (int r = 0; r < repeats + 1; ++r) {  // the first round warms the sockets up
    double ag = 0, rs = 0, ar = 0, cp = 0, cpu = 0;
    // Runs one collective after a barrier, adding its wall time to `wall` and the process's
    // CPU time inside it to `cpu`.
    auto timed = [&](double& wall, const std::function<void()>& collective) {
      pg.barrier({"bench"});
      const auto t0 = Clock::now();
      const double c0 = process_cpu_ms();
      collective();
      wall += ms_since(t0);
      cpu += process_cpu_ms() - c0;
    };
    for (const auto& u : units) {
      const int64_t shard = u.at("shard_numel"), numel = u.at("numel");
      if (N == 1 || shard == 0) continue;
      auto flat_shard = torch::randn({shard});
      for (int g = 0; g < gathers_of(u.at("name")); ++g) {
        auto gathered = torch::empty({N * shard});
        timed(ag, [&] { pg.all_gather_into_tensor(gathered, flat_shard, {"bench"}); });
        const auto t0 = Clock::now();
        auto unsharded = torch::empty({numel});
        unsharded.copy_(gathered.narrow(0, 0, numel));
        cp += ms_since(t0);
      }
      if (s == fsdpp::ShardingStrategy::NO_SHARD) {
        auto grads = torch::randn({numel});
        timed(ar, [&] {
          pg.all_reduce(grads, fsdpp::dist::ReduceOp::SUM, {"bench"});
          grads.div_(N);
        });
      } else {
        auto grads = torch::randn({numel});
        auto t0 = Clock::now();
        auto input = torch::empty({N * shard});  // as fsdpp: written once, gradient or padding
        input.narrow(0, 0, numel).copy_(grads);
        input.narrow(0, numel, N * shard - numel).zero_();
        cp += ms_since(t0);
        auto output = torch::empty({shard});
        timed(rs, [&] { pg.reduce_scatter_tensor(output, input, fsdpp::dist::ReduceOp::SUM, {"bench"}); });
        t0 = Clock::now();
        output.div_(N);
        cp += ms_since(t0);
      }
    }
    if (r == 0) {
      pg.reset_counters();
      continue;
    }
    t_ag.push_back(ag);
    t_rs.push_back(rs);
    t_ar.push_back(ar);
    t_copy.push_back(cp);
    cpu_comm.push_back(cpu);
  }
  const auto counters = pg.counters();
  if (world->rank() == 0) {
    json j;
    j["strategy"] = strategy;
    j["world_size"] = N;
    j["repeats"] = repeats;
    j["t_all_gather_ms"] = median(t_ag);
    j["t_reduce_scatter_ms"] = median(t_rs);
    j["t_all_reduce_ms"] = median(t_ar);
    j["t_comm_ms"] = median(t_ag) + median(t_rs) + median(t_ar);
    j["t_copy_ms"] = median(t_copy);
    // Rank 0's CPU time (all its threads) inside those collectives: the part of T_comm that
    // cannot overlap compute when every core is computing.
    j["t_comm_cpu_ms"] = median(cpu_comm);
    // Barriers are not part of a step's traffic.
    auto c = counters;
    c.bytes[static_cast<int>(fsdpp::dist::Collective::BARRIER)] = 0;
    c.calls[static_cast<int>(fsdpp::dist::Collective::BARRIER)] = 0;
    j["comm_per_step"] = counters_json(c, repeats);
    j["comm_bytes_per_step"] = static_cast<double>(c.total_bytes()) / repeats;
    j["units"] = units;
    write_json(out_path, j);
  }
  pg.barrier({"bench"});
  return 0;
}

// What the runtime itself costs: LibTorch, Gloo, the launcher's environment, and the code paths
// of a training step (forward, backward, AdamW, fully_shard's collectives), with tensors too
// small to matter. fsdpp-estimate's runtime term is this number.
int cmd_baseline(const std::string& out_path) {
  fsdpp::dist::InitOptions init;
  init.num_threads = 1;
  auto world = fsdpp::dist::init_from_env(init);
  at::set_num_threads(1);
  const double after_init = proc_status_mb("VmHWM");
  fsdpp::models::LlamaConfig c;
  c.vocab_size = 16;
  c.dim = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.max_seq_len = 8;
  fsdpp::models::Llama model(c);
  fsdpp::FullyShardOptions opts;
  opts.mesh = world->mesh();
  fsdpp::apply_fully_shard(*model, fsdpp::transformer_layer_policy({"TransformerBlock"}), opts);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  for (int step = 0; step < 2; ++step) {
    auto x = torch::randint(16, {1, 8}), y = torch::randint(16, {1, 8});
    auto out = fsdpp::forward(model, x, y);
    out.loss.backward();
    opt.step();
    opt.zero_grad();
  }
  const auto peak = gather_doubles(*world, proc_status_mb("VmHWM"));
  const auto init_peak = gather_doubles(*world, after_init);
  if (world->rank() == 0) {
    write_json(out_path, {{"world_size", world->size()}, {"peak_rss_mb", peak},
                          {"after_init_rss_mb", init_peak}});
  }
  world->group()->barrier({"bench"});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdpp-bench: the fsdpp side of make bench (see docs/benchmarks.md)"};
  app.require_subcommand(1);
  std::string dir, strategy = "full_shard", out;
  int steps = 5, warmup = 2, repeats = 3;
  bool no_fsdp = false;
  auto* init = app.add_subcommand("init", "write DIR/init.safetensors from DIR/config.json");
  init->add_option("--dir", dir)->required();
  auto* train = app.add_subcommand("train", "train and time the model of DIR");
  train->add_option("--dir", dir)->required();
  train->add_option("--strategy", strategy);
  train->add_option("--steps", steps)->check(CLI::PositiveNumber);
  train->add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  train->add_option("--out", out)->required();
  Prefetch prefetch;
  train->add_option("--forward-prefetch", prefetch.forward, "units gathered ahead in forward")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--backward-prefetch", prefetch.backward,
                    "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH");
  train->add_option("--reduce-bucket-size", prefetch.reduce_bucket_size,
                    "gradient elements per reduce-scatter bucket (0: one per unit)")
      ->check(CLI::NonNegativeNumber);
  train->add_flag("--keep-ends", prefetch.keep_ends,
                  "the root and the last block keep their parameters from forward to backward");
  train->add_flag("--bf16", prefetch.bf16, "bf16 parameters and compute, fp32 reduction and master weights");
  train->add_flag("--ac", prefetch.ac, "activation checkpointing of every TransformerBlock");
  train->add_flag("--ac-selective", prefetch.ac_selective,
                  "with --ac: selective checkpointing (the projections' products kept)");
  train->add_option("--fp8", prefetch.fp8, "float8 GEMMs of the projections torchao's auto filter takes")
      ->check(CLI::IsMember({"off", "tensorwise", "rowwise"}));
  bool fused = false;
  train->add_flag("--fused", fused, "the fused AdamW (at::_fused_adamw_)");
  Parallel parallel;
  train->add_option("--tp", parallel.tp, "tensor-parallel degree (the Llama plan; FSDP over the ranks left)")
      ->check(CLI::PositiveNumber);
  train->add_flag("--sp", parallel.sp, "with --tp: sequence parallelism");
  int64_t local_batch = 0;
  train->add_option("--local-batch", local_batch, "sequences per data-parallel rank (default: the config's)");
  train->add_flag("--no-fsdp", no_fsdp, "every rank trains its own unsharded model (no communication)");
  std::string profile;
  train->add_option("--profile", profile, "the timed steps under PyTorch's profiler, into this Chrome trace (rank 0)");
  bool count_alloc = false;
  train->add_flag("--count-alloc", count_alloc, "also report the peak of live tensor bytes (counting allocator)");
  auto* coll = app.add_subcommand("collectives", "time one step's collectives standalone");
  coll->add_option("--dir", dir)->required();
  coll->add_option("--strategy", strategy);
  coll->add_option("--repeats", repeats)->check(CLI::PositiveNumber);
  coll->add_flag("--keep-ends", prefetch.keep_ends,
                 "as train --keep-ends: the root and the last block gather once");
  coll->add_option("--out", out)->required();
  auto* base = app.add_subcommand("baseline", "measure the runtime's own memory");
  base->add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);
  try {
    if (*init) return cmd_init(dir);
    if (*train) return cmd_train(dir, strategy, prefetch, steps, warmup, out, no_fsdp, count_alloc, parallel, local_batch, fused, profile);
    if (*coll) return cmd_collectives(dir, strategy, repeats, prefetch, out);
    if (*base) return cmd_baseline(out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 2;
}
