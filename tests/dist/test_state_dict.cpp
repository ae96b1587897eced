// State dicts of fully_shard'ed models: save, load into a fresh model and optimizer, and check
// that training goes on exactly as without the round trip; the FULL file as others read it;
// corruption, name and shape errors, and a LOCAL checkpoint on the wrong world size.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include "../support/test_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/optim/optimizer_state.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"
#include "world_fixture.h"

using namespace fsdpp;
namespace fs = std::filesystem;
using state::StateDictType;

namespace {

constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3 and 4 ranks

struct Trained {
  test::TinyTransformer model{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt;
};

FullyShardOptions options_for(ShardingStrategy s) {
  auto& w = test::world();
  FullyShardOptions o;
  o.strategy = s;
  if (s == ShardingStrategy::HYBRID_SHARD) {
    o.mesh = w.init_device_mesh({2, w.size() / 2}, {"replicate", "shard"});
  } else {
    o.mesh = w.mesh();
  }
  return o;
}

Trained make(ShardingStrategy s = ShardingStrategy::FULL_SHARD, int64_t vocab = 29,
             int64_t layers = 2, uint64_t seed = 7) {
  torch::manual_seed(seed);
  Trained t;
  t.model = test::TinyTransformer(vocab, 16, 2, layers);
  t.model->shard(options_for(s));
  t.opt = std::make_unique<torch::optim::AdamW>(
      t.model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  return t;
}

void train_step(Trained& t, int step) {
  auto& w = test::world();
  const int64_t local = kGlobalBatch / w.size();
  auto g = at::make_generator<at::CPUGeneratorImpl>(3000 + step);
  auto tokens = torch::randint(0, 29, {kGlobalBatch, 8}, g).narrow(0, w.rank() * local, local);
  auto x = tokens.narrow(1, 0, 7), y = tokens.narrow(1, 1, 7);
  auto logits = fsdpp::forward(t.model, x);
  torch::cross_entropy_loss(logits.reshape({-1, 29}), y.reshape({-1})).backward();
  t.opt->step();
  t.opt->zero_grad();
}

// The same fresh directory name on every rank.
fs::path shared_dir(const std::string& name) {
  auto& w = test::world();
  auto v = torch::full({1}, static_cast<int64_t>(w.rank() == 0 ? getpid() : 0), torch::kLong);
  w.group()->broadcast(v, 0);
  return fs::temp_directory_path() /
         fmt::format("fsdpp_state_dict_{}", v.item<int64_t>()) / name;
}

void cleanup(const fs::path& dir) {
  test::world().group()->barrier();
  if (test::world().rank() == 0) state::remove_tree(dir.parent_path());
}

std::map<std::string, torch::Tensor> full_map(Trained& t) {
  std::map<std::string, torch::Tensor> m;
  for (auto& [name, v] : full_parameters(*t.model)) m[name] = v;
  return m;
}

void expect_same_params(Trained& a, Trained& b, const std::string& what) {
  auto pa = full_map(a), pb = full_map(b);
  ASSERT_EQ(pa.size(), pb.size()) << what;
  for (auto& [name, v] : pa) {
    ASSERT_TRUE(pb.count(name)) << what << " " << name;
    EXPECT_TRUE(torch::equal(v, pb[name])) << what << " " << name;
  }
}

void expect_same_optim(Trained& a, Trained& b, const std::string& what) {
  auto na = a.model->named_parameters(), nb = b.model->named_parameters();
  ASSERT_EQ(na.size(), nb.size());
  for (const auto& item : na) {
    const auto& pa = item.value();
    const auto& pb = nb[item.key()];
    auto ia = a.opt->state().find(pa.unsafeGetTensorImpl());
    auto ib = b.opt->state().find(pb.unsafeGetTensorImpl());
    ASSERT_TRUE(ia != a.opt->state().end()) << what << " " << item.key();
    ASSERT_TRUE(ib != b.opt->state().end()) << what << " " << item.key();
    auto& sa = static_cast<torch::optim::AdamWParamState&>(*ia->second);
    auto& sb = static_cast<torch::optim::AdamWParamState&>(*ib->second);
    EXPECT_EQ(sa.step(), sb.step()) << what << " " << item.key();
    EXPECT_TRUE(torch::equal(sa.exp_avg(), sb.exp_avg())) << what << " " << item.key();
    EXPECT_TRUE(torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq())) << what << " " << item.key();
  }
}

void round_trip(StateDictType type, ShardingStrategy s) {
  const std::string what = std::string(state::to_string(type)) + "/" + to_string(s);
  auto& w = test::world();
  auto a = make(s);
  train_step(a, 0);
  train_step(a, 1);
  auto dir = shared_dir(std::string("rt_") + state::to_string(type));
  state::SaveOptions so;
  so.type = type;
  state::save_state_dict(dir, *a.model, a.opt.get(), w.group(), so);
  auto b = make(s, 29, 2, /*seed=*/99);  // different initial weights
  state::load_state_dict(dir, *b.model, b.opt.get(), w.group());
  expect_same_params(a, b, what + " after load");
  expect_same_optim(a, b, what + " after load");
  train_step(a, 2);
  train_step(b, 2);
  expect_same_params(a, b, what + " one step later");
  expect_same_optim(a, b, what + " one step later");
  cleanup(dir);
}

}  // namespace

TEST(StateDict, RoundTripSharded) { round_trip(StateDictType::SHARDED, ShardingStrategy::FULL_SHARD); }
TEST(StateDict, RoundTripFull) { round_trip(StateDictType::FULL, ShardingStrategy::FULL_SHARD); }
TEST(StateDict, RoundTripLocal) { round_trip(StateDictType::LOCAL, ShardingStrategy::FULL_SHARD); }

TEST(StateDict, RoundTripOtherStrategies) {
  std::vector<ShardingStrategy> ss{ShardingStrategy::NO_SHARD, ShardingStrategy::ZERO1};
  if (test::world().size() == 4) ss.push_back(ShardingStrategy::HYBRID_SHARD);
  for (auto s : ss) {
    for (auto t : {StateDictType::SHARDED, StateDictType::FULL, StateDictType::LOCAL}) {
      round_trip(t, s);
    }
  }
}

TEST(StateDict, FullFileReadable) {
  auto& w = test::world();
  auto a = make();
  train_step(a, 0);
  auto dir = shared_dir("full");
  state::SaveOptions so;
  so.type = StateDictType::FULL;
  state::save_state_dict(dir, *a.model, a.opt.get(), w.group(), so);
  auto full = full_map(a);
  if (w.rank() == 0) {
    auto f = state::SafetensorsFile::open(dir / "model.safetensors");
    std::set<std::string> names(f.names().begin(), f.names().end());
    for (auto& [name, v] : full) {
      ASSERT_TRUE(names.count(name)) << name;
      EXPECT_EQ(f.info(name).shape, v.sizes().vec()) << name;
      EXPECT_TRUE(torch::equal(f.get(name), v)) << name;
    }
    // Parameters plus the ln/embedding-free model's buffers (none here): nothing else.
    EXPECT_EQ(names.size(), full.size());
    auto o = state::SafetensorsFile::open(dir / "optim.safetensors");
    for (auto& [name, v] : full) {
      EXPECT_EQ(o.info("optim." + name + ".exp_avg").shape, v.sizes().vec()) << name;
      EXPECT_EQ(o.get("optim." + name + ".step").item<int64_t>(), 1) << name;
    }
    // Only rank 0 writes files.
    for (const auto& e : fs::directory_iterator(dir)) {
      const auto n = e.path().filename().string();
      EXPECT_TRUE(n == "model.safetensors" || n == "optim.safetensors" || n == "index.json") << n;
    }
  }
  // A bare model.safetensors (as Hugging Face writes it, no index) loads too.
  w.group()->barrier();
  if (w.rank() == 0) {
    fs::remove(dir / "index.json");
    fs::remove(dir / "optim.safetensors");
  }
  w.group()->barrier();
  auto b = make(ShardingStrategy::FULL_SHARD, 29, 2, 99);
  state::load_state_dict(dir, *b.model, nullptr, w.group());
  expect_same_params(a, b, "bare model.safetensors");
  cleanup(dir);
}

TEST(StateDict, ChecksumMismatchNamesFileAndTensor) {
  auto& w = test::world();
  auto a = make();
  train_step(a, 0);
  auto dir = shared_dir("corrupt");
  state::save_state_dict(dir, *a.model, a.opt.get(), w.group());
  std::string tensor;
  if (w.rank() == 0) {
    // Flip one byte in the middle of the first tensor's data in shard-0.
    auto path = dir / "shard-0.safetensors";
    uint64_t header = 0, begin = 0, nbytes = 0;
    {
      auto f = state::SafetensorsFile::open(path);
      tensor = f.names().front();
      begin = f.info(tensor).data_begin;
      nbytes = f.info(tensor).nbytes();
    }
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.read(reinterpret_cast<char*>(&header), 8);
    const auto pos = static_cast<std::streamoff>(8 + header + begin + nbytes / 2);
    io.seekg(pos);
    char c = 0;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(pos);
    io.write(&c, 1);
  }
  w.group()->barrier();
  auto b = make(ShardingStrategy::FULL_SHARD, 29, 2, 99);
  auto before = full_map(b);
  try {
    state::load_state_dict(dir, *b.model, b.opt.get(), w.group());
    ADD_FAILURE() << "load of a corrupt checkpoint did not throw";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("shard-0.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
    if (w.rank() == 0) EXPECT_NE(msg.find("'" + tensor + "'"), std::string::npos) << msg;
  }
  // Nothing changed.
  for (auto& [name, v] : full_map(b)) EXPECT_TRUE(torch::equal(v, before[name])) << name;
  EXPECT_TRUE(b.opt->state().empty());
  cleanup(dir);
}

TEST(StateDict, NameAndShapeErrors) {
  auto& w = test::world();
  auto small = make(ShardingStrategy::FULL_SHARD, 29, 1);
  auto dir = shared_dir("names");
  state::save_state_dict(dir, *small.model, nullptr, w.group());
  auto b = make();
  try {
    state::load_state_dict(dir, *b.model, b.opt.get(), w.group());
    ADD_FAILURE() << "no error for a missing parameter";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'blocks.1."), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  // The other way round: the checkpoint has tensors the model lacks.
  state::save_state_dict(dir, *b.model, nullptr, w.group());
  try {
    state::load_state_dict(dir, *small.model, nullptr, w.group());
    ADD_FAILURE() << "no error for an unexpected tensor";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor 'blocks.1."), std::string::npos)
        << e.what();
  }
  auto wide = make(ShardingStrategy::FULL_SHARD, 31);
  try {
    state::load_state_dict(dir, *wide.model, nullptr, w.group());
    ADD_FAILURE() << "no error for a shape mismatch";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'emb.weight' has shape [29, 16] in the checkpoint but "
                                         "[31, 16] in the model"),
              std::string::npos)
        << e.what();
  }
  cleanup(dir);
}

TEST(StateDict, LocalOnOtherWorldSizeRefused) {
  // One run has one world size: the index is edited to say another (the reshard tests in
  // tests/state/ save and load in two runs of different sizes).
  auto& w = test::world();
  auto a = make();
  auto dir = shared_dir("local");
  state::SaveOptions so;
  so.type = StateDictType::LOCAL;
  state::save_state_dict(dir, *a.model, a.opt.get(), w.group(), so);
  w.group()->barrier();
  if (w.rank() == 0) {
    std::ifstream in(dir / "index.json");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    const std::string from = fmt::format("\"world_size\": {}", w.size());
    auto pos = s.find(from);
    ASSERT_NE(pos, std::string::npos) << s.substr(0, 200);
    s.replace(pos, from.size(), fmt::format("\"world_size\": {}", w.size() + 1));
    std::ofstream(dir / "index.json") << s;
  }
  w.group()->barrier();
  try {
    state::load_state_dict(dir, *a.model, a.opt.get(), w.group());
    ADD_FAILURE() << "LOCAL loaded on another world size";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("saved on {} ranks cannot be loaded on {} rank{}",
                                                     w.size() + 1, w.size(), w.size() == 1 ? "" : "s")),
              std::string::npos)
        << e.what();
  }
  cleanup(dir);
}

TEST(StateDict, OddModelRoundTrip) {
  // A 0-dim parameter, a frozen one (no optimizer state), buffers, rows that do not divide.
  auto& w = test::world();
  const int64_t local = kGlobalBatch / w.size();
  auto make_odd = [&](uint64_t seed) {
    torch::manual_seed(seed);
    test::OddMLP m;
    m->shard(options_for(ShardingStrategy::FULL_SHARD));
    auto opt = std::make_unique<torch::optim::AdamW>(m->parameters(),
                                                     torch::optim::AdamWOptions(1e-2));
    return std::make_pair(m, std::move(opt));
  };
  auto step = [&](test::OddMLP& m, torch::optim::AdamW& opt, int s) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(4000 + s);
    auto x = torch::randn({kGlobalBatch, 13}, g).narrow(0, w.rank() * local, local);
    auto y = torch::randn({kGlobalBatch, 2}, g).narrow(0, w.rank() * local, local);
    torch::mse_loss(fsdpp::forward(m, x), y).backward();
    opt.step();
    opt.zero_grad();
  };
  auto [a, aopt] = make_odd(7);
  step(a, *aopt, 0);
  {
    torch::NoGradGuard no_grad;
    a->in->shift.fill_(0.25);  // a buffer that differs from the fresh model's
  }
  for (auto t : {StateDictType::SHARDED, StateDictType::FULL, StateDictType::LOCAL}) {
    auto dir = shared_dir(std::string("odd_") + state::to_string(t));
    state::SaveOptions so;
    so.type = t;
    state::save_state_dict(dir, *a, aopt.get(), w.group(), so);
    auto [b, bopt] = make_odd(99);
    state::load_state_dict(dir, *b, bopt.get(), w.group());
    EXPECT_TRUE(torch::equal(b->in->shift, a->in->shift)) << state::to_string(t);
    EXPECT_EQ(aopt->state().size(), bopt->state().size()) << state::to_string(t);
    auto c = make_odd(7);  // `a` must stay as saved for the next layout: step a copy
    state::load_state_dict(dir, *c.first, c.second.get(), w.group());
    step(c.first, *c.second, 1);
    step(b, *bopt, 1);
    auto pb = full_parameters(*b), pc = full_parameters(*c.first);
    ASSERT_EQ(pb.size(), pc.size());
    for (size_t i = 0; i < pb.size(); ++i) {
      EXPECT_TRUE(torch::equal(pb[i].second, pc[i].second)) << state::to_string(t) << " " << pb[i].first;
    }
    cleanup(dir);
  }
}

TEST(StateDict, EveryOptimizerKindRoundTrips) {
  // Every optimizer the state adapter knows (fsdpp/optim/optimizer_state.h), in each layout:
  // state equal after the load, and the next step equal bit for bit.
  namespace o = torch::optim;
  auto& w = test::world();
  using Make = std::function<std::unique_ptr<o::Optimizer>(std::vector<torch::Tensor>)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"Adam+amsgrad", [](auto p) { return std::make_unique<o::Adam>(p, o::AdamOptions(1e-2).amsgrad(true)); }},
      {"SGD+momentum", [](auto p) { return std::make_unique<o::SGD>(p, o::SGDOptions(0.1).momentum(0.9)); }},
      {"RMSprop", [](auto p) {
         return std::make_unique<o::RMSprop>(p, o::RMSpropOptions(1e-2).momentum(0.5).centered(true));
       }},
      {"Adagrad", [](auto p) { return std::make_unique<o::Adagrad>(p, o::AdagradOptions(0.1)); }},
  };
  const int64_t local = kGlobalBatch / w.size();
  auto step = [&](test::TinyTransformer& m, o::Optimizer& opt, int s) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(5000 + s);
    auto tokens = torch::randint(0, 29, {kGlobalBatch, 8}, g).narrow(0, w.rank() * local, local);
    auto logits = fsdpp::forward(m, tokens.narrow(1, 0, 7));
    torch::cross_entropy_loss(logits.reshape({-1, 29}), tokens.narrow(1, 1, 7).reshape({-1})).backward();
    opt.step();
    opt.zero_grad();
  };
  auto model = [&](uint64_t seed) {
    torch::manual_seed(seed);
    test::TinyTransformer m(29, 16, 2, 2);
    m->shard(options_for(ShardingStrategy::FULL_SHARD));
    return m;
  };
  for (const auto& [label, make_opt] : makers) {
    for (auto t : {StateDictType::SHARDED, StateDictType::FULL, StateDictType::LOCAL}) {
      const std::string what = label + "/" + state::to_string(t);
      auto a = model(7);
      auto aopt = make_opt(a->parameters());
      step(a, *aopt, 0);
      step(a, *aopt, 1);
      auto dir = shared_dir("kinds_" + std::string(state::to_string(t)));
      state::SaveOptions so;
      so.type = t;
      state::save_state_dict(dir, *a, aopt.get(), w.group(), so);
      auto b = model(99);
      auto bopt = make_opt(b->parameters());
      state::load_state_dict(dir, *b, bopt.get(), w.group());
      const auto kind = *optim::optimizer_kind(*aopt);
      auto nb = b->named_parameters();
      for (const auto& item : a->named_parameters()) {
        auto sa = optim::get_param_state(*aopt, kind, item.value());
        auto sb = optim::get_param_state(*bopt, kind, nb[item.key()]);
        ASSERT_TRUE(sa && sb) << what << " " << item.key();
        EXPECT_EQ(sa->step, sb->step) << what << " " << item.key();
        ASSERT_EQ(sa->tensors.size(), sb->tensors.size()) << what << " " << item.key();
        for (const auto& [k, v] : sa->tensors) {
          EXPECT_TRUE(torch::equal(v, sb->tensors.at(k))) << what << " " << item.key() << " " << k;
        }
      }
      step(a, *aopt, 2);
      step(b, *bopt, 2);
      auto pa = full_parameters(*a), pb = full_parameters(*b);
      ASSERT_EQ(pa.size(), pb.size());
      for (size_t i = 0; i < pa.size(); ++i) {
        EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << what << " " << pa[i].first;
      }
      cleanup(dir);
    }
  }
}
