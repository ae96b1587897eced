// What of the GPU path runs and is checked without a GPU: which device a rank takes and the
// errors for one it cannot have, the fused AdamW (ATen has its CPU kernel) against LibTorch's
// AdamW, the FLOPs per token against the formula written out, the config keys, and the device
// primitives' CPU behaviour (no-ops, nothing held).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/device.h"
#include "fsdpp/estimate/flops.h"
#include "fsdpp/estimate/llama_shape.h"
#include "fsdpp/optim/fused_adamw.h"
#include "fsdpp/observe/mfu.h"
#include "fsdpp/train/config.h"

using namespace fsdpp;

namespace {

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

}  // namespace

TEST(Device, ChoiceOnAMachineWithoutGpus) {
  ASSERT_EQ(dist::cuda_device_count(), 0) << "these expectations are for a machine without GPUs";
  unsetenv("FSDPP_DEVICE");
  EXPECT_TRUE(dist::choose_device(std::nullopt, 0, 0).is_cpu());  // a CUDA build behaves as before
  EXPECT_TRUE(dist::choose_device(std::string("cpu"), 3, 1).is_cpu());
  const auto why = config_error([] { dist::choose_device(std::string("cuda"), 3, 1); });
  EXPECT_NE(why.find("rank 3 (LOCAL_RANK 1) was asked to compute on cuda:1"), std::string::npos) << why;
  EXPECT_NE(why.find("sees 0 CUDA device(s)"), std::string::npos) << why;
  EXPECT_NE(why.find("training.use_cpu=true"), std::string::npos) << why;
  EXPECT_NE(config_error([] { dist::choose_device(std::string("cuda:7"), 0, 0); }).find("cuda:7"),
            std::string::npos);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x"}) {
    const auto msg = config_error([&] { dist::choose_device(std::string(bad), 0, 0); });
    EXPECT_NE(msg.find("expected cpu, cuda"), std::string::npos) << bad << ": " << msg;
  }
  setenv("FSDPP_DEVICE", "cuda:0", 1);
  EXPECT_FALSE(config_error([] { dist::choose_device(std::nullopt, 0, 0); }).empty());
  EXPECT_TRUE(dist::choose_device(std::string("cpu"), 0, 0).is_cpu());  // the argument wins
  unsetenv("FSDPP_DEVICE");
}

TEST(Device, CpuStreamsAreNoOps) {
  const c10::Device cpu(c10::kCPU);
  auto s = dist::Stream::current(cpu);
  EXPECT_FALSE(s.on_device());
  EXPECT_FALSE(dist::Stream::from_pool(cpu).on_device());
  auto e = dist::Event::recorded_on(s);
  EXPECT_FALSE(e.recorded());
  EXPECT_TRUE(e.query());
  s.wait(e);
  s.synchronize();
  { dist::StreamGuard g(s); }
  EXPECT_FALSE(dist::has_device_memory(cpu));
  EXPECT_EQ(dist::device_memory(cpu).total, 0);
  EXPECT_EQ(observe::measure_matmul_flops(cpu), 0);
  EXPECT_EQ(observe::mfu(1e9, 1e3, 1, 0), 0);
  EXPECT_DOUBLE_EQ(observe::mfu(2e9, 1e3, 4, 1e12), 0.5);  // 2e12 FLOP/s over 4 x 1e12
}

// ATen's CPU kernel of _fused_adamw_ against LibTorch's AdamW: the same update, also with
// amsgrad, parameters without a gradient in a step, and a state whose step a checkpoint set.
TEST(FusedAdamW, MatchesLibTorchAdamW) {
  for (bool amsgrad : {false, true}) {
    torch::manual_seed(11);
    std::vector<at::Tensor> a, b;
    for (auto shape : {std::vector<int64_t>{37, 5}, {101}, {2, 3, 4}}) {
      auto p = torch::randn(shape);
      a.push_back(p.clone().requires_grad_(true));
      b.push_back(p.clone().requires_grad_(true));
    }
    const auto options =
        torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1).eps(1e-8).amsgrad(amsgrad);
    torch::optim::AdamW plain(a, options);
    optim::FusedAdamW fused(b, options);
    for (int step = 0; step < 6; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        if (step == 2 && i == 1) {  // no gradient this step: the parameter is left alone
          a[i].mutable_grad() = at::Tensor();
          b[i].mutable_grad() = at::Tensor();
          continue;
        }
        auto g = torch::randn_like(a[i]);
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      plain.step();
      fused.step();
      if (step == 3) {
        // As a checkpoint restores it: the next step continues from this count.
        for (auto* o : {static_cast<torch::optim::Optimizer*>(&plain), static_cast<torch::optim::Optimizer*>(&fused)}) {
          for (const auto& p : o == &plain ? a : b) {
            auto& st = static_cast<torch::optim::AdamWParamState&>(*o->state().at(p.unsafeGetTensorImpl()));
            st.step(st.step() + 10);
          }
        }
      }
    }
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-7))
          << "amsgrad " << amsgrad << ": " << (a[i] - b[i]).abs().max().item<double>();
      auto& sa = static_cast<torch::optim::AdamWParamState&>(*plain.state().at(a[i].unsafeGetTensorImpl()));
      auto& sb = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(b[i].unsafeGetTensorImpl()));
      EXPECT_EQ(sa.step(), sb.step());
      EXPECT_TRUE(torch::allclose(sa.exp_avg_sq(), sb.exp_avg_sq(), 1e-5, 1e-9));
    }
  }
}

// 6 x (every matrix a token multiplies with) + 12 L H D T, written out for a small Llama.
TEST(Flops, PerTokenIsSixNPlusAttention) {
  models::LlamaConfig c;
  c.vocab_size = 100;
  c.dim = 32;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 48;
  c.max_seq_len = 16;
  const auto model = describe_decoder(decoder_shape_of(c));
  const int64_t kv = 2 * 8;
  const int64_t layer = 32 * 32 + 2 * 32 * kv + 32 * 32 + 3 * 32 * 48 + 2 * 32;
  const double n = 3.0 * layer + 32 + 100 * 32;  // final norm, output layer (no embedding)
  EXPECT_DOUBLE_EQ(training_flops_per_token(model, 16), 6 * n + 12.0 * 3 * 4 * 8 * 16);
  c.tie_embeddings = true;  // the one matrix is the output layer's multiply
  EXPECT_DOUBLE_EQ(training_flops_per_token(describe_decoder(decoder_shape_of(c)), 16),
                   6 * n + 12.0 * 3 * 4 * 8 * 16);
  EXPECT_THROW(training_flops_per_token(describe_parameter_count(1000, 2), 16), ConfigError);
}

TEST(Device, ConfigKeys) {
  const std::string yaml = "data:\n  path: corpus.txt\n";
  auto c = train::TrainConfig::from_yaml_string(yaml, {"training.max_steps=1"}, "t.yaml");
  EXPECT_FALSE(c.training.on_cpu());
  EXPECT_TRUE(c.training.optim.empty());
  c = train::TrainConfig::from_yaml_string(yaml, {"training.max_steps=1", "training.use_cpu=true"}, "t.yaml");
  EXPECT_TRUE(c.training.on_cpu());
  c = train::TrainConfig::from_yaml_string(yaml, {"training.max_steps=1", "training.no_cuda=true",
                                                  "training.optim=adamw_torch_fused"}, "t.yaml");
  EXPECT_TRUE(c.training.on_cpu());
  EXPECT_EQ(c.training.optim, "adamw_torch_fused");
  const auto why = config_error([&] {
    train::TrainConfig::from_yaml_string(yaml, {"training.max_steps=1", "training.optim=sgd"}, "t.yaml");
  });
  EXPECT_NE(why.find("training.optim='sgd'"), std::string::npos) << why;
  EXPECT_NE(why.find("adamw_torch_fused"), std::string::npos) << why;
}
