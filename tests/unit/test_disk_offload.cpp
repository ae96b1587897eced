// DiskOffloadedOptimizer: the same parameters and state, bit for bit, as the optimizer with its
// state in memory (AdamW, Adam, SGD, RMSprop, Adagrad; skipped parameters, several groups,
// strided parameters); replaced state moves back into the file; resident memory measured
// against in-memory state; page-cache dropping; errors for bad directories and a full disk.
#include <gtest/gtest.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/disk_offload.h"
#include "fsdpp/state/atomic_dir.h"

using fsdpp::DiskOffloadedOptimizer;
using fsdpp::DiskOffloadOptions;
using fsdpp::OffloadError;
namespace fs = std::filesystem;
namespace optim = torch::optim;

namespace {

class DiskOffload : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("fsdpp_test_offload_{}_{}", ::getpid(), info->name());
    fsdpp::state::remove_tree(dir_);
  }
  void TearDown() override { fsdpp::state::remove_tree(dir_); }
  DiskOffloadOptions opts(bool drop = false) const {
    DiskOffloadOptions o;
    o.dir = dir_ / "state";  // made by the wrapper
    o.rank = 3;
    o.drop_page_cache = drop;
    return o;
  }
  fs::path dir_;
};

// Parameters of every shape that matters: a matrix, a transposed (strided but dense) one, a
// non-dense slice, a vector, a 0-dim scalar.
std::vector<at::Tensor> make_params() {
  torch::manual_seed(11);
  std::vector<at::Tensor> ps;
  ps.push_back(torch::randn({37, 13}));
  ps.push_back(torch::randn({13, 29}).t());
  ps.push_back(torch::randn({10, 16}).slice(1, 0, 16, 2));
  ps.push_back(torch::randn({37}));
  ps.push_back(torch::randn({}));
  return ps;
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) {
    auto c = torch::empty_strided(p.sizes(), p.strides());
    c.copy_(p);
    out.push_back(c);
  }
  return out;
}

// Two groups with different options: the first three parameters, then the rest.
using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<at::Tensor>&)>;
template <class Opt, class Options>
Factory factory(Options a, Options b) {
  return [a, b](const std::vector<at::Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    std::vector<optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<at::Tensor>(ps.begin(), ps.begin() + 3),
                        std::make_unique<Options>(a));
    groups.emplace_back(std::vector<at::Tensor>(ps.begin() + 3, ps.end()),
                        std::make_unique<Options>(b));
    return std::make_unique<Opt>(std::move(groups), a);
  };
}

struct Case {
  std::string name;
  Factory make;
};

std::vector<Case> cases() {
  return {
      {"AdamW", factory<optim::AdamW>(optim::AdamWOptions(1e-2).weight_decay(0.1),
                                      optim::AdamWOptions(3e-3).betas({0.8, 0.9}))},
      {"AdamW_amsgrad", factory<optim::AdamW>(optim::AdamWOptions(1e-2).amsgrad(true),
                                              optim::AdamWOptions(2e-2).amsgrad(true))},
      {"Adam", factory<optim::Adam>(optim::AdamOptions(1e-2).weight_decay(0.01),
                                    optim::AdamOptions(5e-3).amsgrad(true))},
      {"SGD_momentum", factory<optim::SGD>(optim::SGDOptions(0.1).momentum(0.9).dampening(0.1),
                                           optim::SGDOptions(0.05).momentum(0.8).weight_decay(0.01))},
      {"SGD_nesterov", factory<optim::SGD>(optim::SGDOptions(0.1).momentum(0.9).nesterov(true),
                                           optim::SGDOptions(0.1))},
      {"RMSprop", factory<optim::RMSprop>(optim::RMSpropOptions(1e-2).momentum(0.9).centered(true),
                                          optim::RMSpropOptions(1e-3))},
      {"Adagrad", factory<optim::Adagrad>(optim::AdagradOptions(0.1).lr_decay(0.01),
                                          optim::AdagradOptions(0.05).weight_decay(0.1))},
  };
}

// Gradients for step `step`: deterministic, and none for parameter 1 on step 2 (the optimizer
// must skip it, its step counter included).
void set_grads(std::vector<at::Tensor>& ps, int step) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(100 + step);
  for (size_t i = 0; i < ps.size(); ++i) {
    auto grad = torch::randn(ps[i].sizes(), g);
    ps[i].mutable_grad() = (step == 2 && i == 1) ? at::Tensor() : grad;
  }
}

// Every state tensor and step counter of parameter `p`, in a fixed order.
std::pair<std::vector<at::Tensor>, int64_t> state_of(optim::Optimizer& opt, const at::Tensor& p) {
  auto it = opt.state().find(p.unsafeGetTensorImpl());
  if (it == opt.state().end()) return {{}, -1};
  auto* s = it->second.get();
  if (auto* a = dynamic_cast<optim::AdamWParamState*>(s)) {
    return {{a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()}, a->step()};
  }
  if (auto* a = dynamic_cast<optim::AdamParamState*>(s)) {
    return {{a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()}, a->step()};
  }
  if (auto* a = dynamic_cast<optim::SGDParamState*>(s)) return {{a->momentum_buffer()}, 0};
  if (auto* a = dynamic_cast<optim::RMSpropParamState*>(s)) {
    return {{a->square_avg(), a->momentum_buffer(), a->grad_avg()}, a->step()};
  }
  if (auto* a = dynamic_cast<optim::AdagradParamState*>(s)) return {{a->sum()}, a->step()};
  return {{}, -2};
}

void expect_same(optim::Optimizer& ref, const std::vector<at::Tensor>& ref_ps,
                 optim::Optimizer& off, const std::vector<at::Tensor>& off_ps,
                 const std::string& what) {
  for (size_t i = 0; i < ref_ps.size(); ++i) {
    EXPECT_TRUE(torch::equal(ref_ps[i], off_ps[i])) << what << " parameter " << i;
    EXPECT_EQ(ref_ps[i].strides(), off_ps[i].strides()) << what << " parameter " << i;
    auto [rs, rstep] = state_of(ref, ref_ps[i]);
    auto [os, ostep] = state_of(off, off_ps[i]);
    EXPECT_EQ(rstep, ostep) << what << " step counter of parameter " << i;
    ASSERT_EQ(rs.size(), os.size()) << what << " parameter " << i;
    for (size_t k = 0; k < rs.size(); ++k) {
      ASSERT_EQ(rs[k].defined(), os[k].defined()) << what << " parameter " << i << " state " << k;
      if (!rs[k].defined()) continue;
      EXPECT_TRUE(torch::equal(rs[k], os[k])) << what << " parameter " << i << " state " << k;
    }
  }
}

TEST_F(DiskOffload, BitIdenticalToInMemoryState) {
  for (const auto& c : cases()) {
    for (bool drop : {false, true}) {
      const std::string what = c.name + (drop ? " drop_page_cache" : "");
      auto ref_ps = make_params();
      auto off_ps = clones(ref_ps);
      auto ref = c.make(ref_ps);
      DiskOffloadedOptimizer off(std::shared_ptr<optim::Optimizer>(c.make(off_ps)), opts(drop));
      for (int step = 0; step < 5; ++step) {
        set_grads(ref_ps, step);
        set_grads(off_ps, step);
        ref->step();
        off.step();
        // Before anything reads the state back: all of it in the file, none of it mapped into
        // the process, and with drop_page_cache none of it in the page cache either.
        EXPECT_EQ(off.unmapped_bytes(), 0) << what;
        EXPECT_EQ(off.resident_bytes(), 0) << what;
        if (drop) EXPECT_EQ(off.cached_bytes(), 0) << what;
        for (size_t i = 0; i < off_ps.size(); ++i) {
          // The gradients are given back as they were.
          EXPECT_EQ(off_ps[i].grad().defined(), ref_ps[i].grad().defined()) << what;
        }
        expect_same(*ref, ref_ps, off.optimizer(), off_ps, what + " step " + std::to_string(step));
        EXPECT_GT(off.resident_bytes(), 0) << what << ": reading the state maps it in";
        off.release();
        EXPECT_EQ(off.resident_bytes(), 0) << what;
        ref->zero_grad();
        off.zero_grad();
      }
      int64_t state_bytes = 0;
      for (const auto& p : off_ps) {
        for (const auto& t : state_of(off.optimizer(), p).first) {
          if (t.defined()) state_bytes += t.nbytes();
        }
      }
      EXPECT_GT(state_bytes, 0) << what;
      EXPECT_GE(off.mapped_bytes(), state_bytes) << what;
    }
  }
}

TEST_F(DiskOffload, ReplacedStateMovesBackIntoTheFile) {
  // What load_state_dict does: new state objects with tensors in ordinary memory.
  auto ref_ps = make_params();
  auto off_ps = clones(ref_ps);
  auto make = cases()[0].make;  // AdamW
  auto ref = make(ref_ps);
  DiskOffloadedOptimizer off(std::shared_ptr<optim::Optimizer>(make(off_ps)), opts());
  for (int step = 0; step < 2; ++step) {
    set_grads(ref_ps, step);
    set_grads(off_ps, step);
    ref->step();
    off.step();
  }
  const int64_t mapped = off.mapped_bytes();
  EXPECT_EQ(off.unmapped_bytes(), 0);
  for (const auto& p : off_ps) {
    auto& s = static_cast<optim::AdamWParamState&>(*off.optimizer().state()[p.unsafeGetTensorImpl()]);
    auto fresh = std::make_unique<optim::AdamWParamState>();
    fresh->step(s.step());
    fresh->exp_avg(s.exp_avg().clone());
    fresh->exp_avg_sq(s.exp_avg_sq().clone());
    off.optimizer().state()[p.unsafeGetTensorImpl()] = std::move(fresh);
  }
  EXPECT_GT(off.unmapped_bytes(), 0);
  // The replaced tensors' regions were given back; the moved state reuses them.
  EXPECT_EQ(off.mapped_bytes(), 0);
  off.offload_state();
  EXPECT_EQ(off.unmapped_bytes(), 0);
  EXPECT_EQ(off.mapped_bytes(), mapped);
  EXPECT_EQ(off.resident_bytes(), 0);
  EXPECT_EQ(off.unmapped_bytes(), 0);
  // Once more, this time moved by step() itself.
  auto& s0 = static_cast<optim::AdamWParamState&>(
      *off.optimizer().state()[off_ps[0].unsafeGetTensorImpl()]);
  s0.exp_avg(s0.exp_avg().clone());
  EXPECT_GT(off.unmapped_bytes(), 0);
  for (int step = 2; step < 4; ++step) {
    set_grads(ref_ps, step);
    set_grads(off_ps, step);
    ref->step();
    off.step();
    EXPECT_EQ(off.unmapped_bytes(), 0);
  }
  expect_same(*ref, ref_ps, off.optimizer(), off_ps, "after replacing the state");
  EXPECT_EQ(off.mapped_bytes(), mapped);
}

TEST_F(DiskOffload, StateOutlivesTheWrapper) {
  auto ps = make_params();
  optim::SGD opt(ps, optim::SGDOptions(0.1).momentum(0.9));
  {
    DiskOffloadedOptimizer off(opt, opts());
    set_grads(ps, 0);
    off.step();
  }
  // The mappings hold the (unlinked) file: the state still reads and updates.
  set_grads(ps, 1);
  opt.step();
  auto buf = static_cast<optim::SGDParamState&>(*opt.state()[ps[0].unsafeGetTensorImpl()])
                 .momentum_buffer();
  EXPECT_TRUE(buf.isfinite().all().item<bool>());
}

TEST_F(DiskOffload, FileNamedByRankUnlinkedUnlessKept) {
  auto ps = make_params();
  optim::AdamW opt(ps, optim::AdamWOptions(1e-3));
  fs::path kept;
  {
    DiskOffloadedOptimizer off(opt, opts());
    EXPECT_EQ(off.file().parent_path(), dir_ / "state");
    EXPECT_EQ(off.file().filename().string().rfind("fsdpp-optim-rank3-", 0), 0u) << off.file();
    EXPECT_FALSE(fs::exists(off.file())) << "unlinked as soon as it is open";
  }
  optim::AdamW opt2(ps, optim::AdamWOptions(1e-3));
  {
    auto o = opts();
    o.keep_file = true;
    DiskOffloadedOptimizer off(opt2, o);
    set_grads(ps, 0);
    off.step();
    kept = off.file();
    EXPECT_TRUE(fs::exists(kept));
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(kept)) % ::sysconf(_SC_PAGESIZE), 0);
    EXPECT_GE(static_cast<int64_t>(fs::file_size(kept)), off.mapped_bytes());
  }
  EXPECT_TRUE(fs::exists(kept));
}

TEST_F(DiskOffload, BadDirectoryOrOptimizerIsAClearError) {
  auto ps = make_params();
  optim::AdamW opt(ps, optim::AdamWOptions(1e-3));
  fs::create_directories(dir_);
  const fs::path file = dir_ / "a_file";
  std::ofstream(file) << "x";
  auto expect_error = [&](const fs::path& dir, const std::string& needle) {
    DiskOffloadOptions o;
    o.dir = dir;
    try {
      DiskOffloadedOptimizer off(opt, o);
      ADD_FAILURE() << "no error for " << dir;
    } catch (const OffloadError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[offload] ", 0), 0u) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      if (!dir.empty()) EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
    }
  };
  expect_error(file, "is not a directory");
  expect_error(file / "sub", "cannot create directory");
  expect_error("/proc/fsdpp_no_such_dir", "cannot create directory");
  expect_error("", "no directory");

  optim::LBFGS lbfgs(ps, optim::LBFGSOptions(1));
  EXPECT_THROW(
      {
        try {
          DiskOffloadedOptimizer off(lbfgs, opts());
        } catch (const OffloadError& e) {
          EXPECT_NE(std::string(e.what()).find("supports torch::optim::AdamW"), std::string::npos);
          throw;
        }
      },
      OffloadError);
}

TEST_F(DiskOffload, FullDiskIsAClearErrorAndGradientsSurvive) {
  // A file-size limit stands in for a full disk: reserving the state's blocks fails the same
  // way (posix_fallocate: EFBIG here, ENOSPC there) before anything is written.
  std::vector<at::Tensor> ps = {torch::zeros({1 << 20})};  // 4 MiB, state 8 MiB
  optim::AdamW opt(ps, optim::AdamWOptions(1e-3));
  DiskOffloadedOptimizer off(opt, opts());
  ps[0].mutable_grad() = torch::ones({1 << 20});
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    off.step();
  } catch (const OffloadError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("[offload] cannot grow the optimizer state file"), std::string::npos) << msg;
  EXPECT_NE(msg.find((dir_ / "state").string()), std::string::npos) << msg;
  EXPECT_TRUE(ps[0].grad().defined());
  EXPECT_TRUE(torch::equal(ps[0], torch::zeros({1 << 20}))) << "no parameter changed";
  // With room again the step goes through.
  off.step();
  EXPECT_FALSE(torch::equal(ps[0], torch::zeros({1 << 20})));
}

// ---- resident memory ----------------------------------------------------------------------

int64_t status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(k, 0) == 0) return std::stoll(line.substr(k.size()));
  }
  return -1;
}

void reset_peak_rss() {
  // "5" resets VmHWM to the current RSS (Linux >= 4.0).
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  ASSERT_TRUE(out.good()) << "cannot reset the peak RSS through /proc/self/clear_refs";
}

struct Measured {
  double peak_mib = 0;   // max RSS during a step, above the RSS before the optimizer existed
  double after_mib = 0;  // RSS after that step, above the same
  double step_ms = 0;
};

// 16 parameters of 1024 x 1600 fp32: 100 MiB of parameters, 200 MiB of AdamW state.
constexpr int kParams = 16;
const std::vector<int64_t> kShape = {1024, 1600};

TEST_F(DiskOffload, ResidentMemoryFallsByTheStateSize) {
  // glibc raises its mmap threshold as large blocks are freed, and then keeps the optimizer's
  // freed temporaries in its heap (in either mode, well over 100 MiB here): a fixed threshold
  // returns every large block on free, so that RSS shows where live data is, not what the
  // allocator cached. (MALLOC_MMAP_THRESHOLD_ does the same for a training run.)
  ASSERT_EQ(::mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
  const int64_t state_bytes = 2LL * kParams * kShape[0] * kShape[1] * 4;
  auto run = [&](int mode) {  // 0: in memory, 1: disk, 2: disk + drop_page_cache
    std::vector<at::Tensor> ps;
    for (int i = 0; i < kParams; ++i) {  // the values do not matter here, only the memory
      ps.push_back(torch::full(kShape, 0.01 * (i + 1)));
      ps.back().mutable_grad() = torch::full(kShape, 0.5);
    }
    auto opt = std::make_shared<optim::AdamW>(ps, optim::AdamWOptions(1e-3).weight_decay(0.1));
    std::unique_ptr<DiskOffloadedOptimizer> off;
    const int64_t base_kb = status_kb("VmRSS");
    if (mode > 0) off = std::make_unique<DiskOffloadedOptimizer>(opt, opts(mode == 2));
    auto step = [&] { off ? off->step() : opt->step(); };
    step();  // makes the state
    Measured m;
    reset_peak_rss();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    m.step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    m.peak_mib = (status_kb("VmHWM") - base_kb) / 1024.0;
    m.after_mib = (status_kb("VmRSS") - base_kb) / 1024.0;
    if (off) {
      EXPECT_EQ(off->resident_bytes(), 0);
      EXPECT_GE(off->mapped_bytes(), state_bytes);
      std::printf("[offload] %s: page cache holding the state after the step: %.1f MiB\n",
                  mode == 2 ? "drop_page_cache" : "disk offload", off->cached_bytes() / 1048576.0);
      if (mode == 2) EXPECT_EQ(off->cached_bytes(), 0);
    }
    return m;
  };
  const Measured mem = run(0);
  const Measured disk = run(1);
  const Measured drop = run(2);
  const double state_mib = state_bytes / 1048576.0;
  std::printf(
      "[offload] AdamW state %.1f MiB over %d parameters; RSS above the parameters and "
      "gradients:\n"
      "[offload]   in memory:              peak +%.1f MiB, after the step +%.1f MiB, step %.0f ms\n"
      "[offload]   disk offload:           peak +%.1f MiB, after the step +%.1f MiB, step %.0f ms\n"
      "[offload]   disk + drop_page_cache: peak +%.1f MiB, after the step +%.1f MiB, step %.0f ms\n",
      state_mib, kParams, mem.peak_mib, mem.after_mib, mem.step_ms, disk.peak_mib, disk.after_mib,
      disk.step_ms, drop.peak_mib, drop.after_mib, drop.step_ms);
  for (const Measured* m : {&disk, &drop}) {
    EXPECT_GE(mem.peak_mib - m->peak_mib, 0.7 * state_mib);
    EXPECT_GE(mem.after_mib - m->after_mib, 0.7 * state_mib);
  }
}

}  // namespace
