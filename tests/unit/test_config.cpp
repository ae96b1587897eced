#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/parallel/shard_group.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/lr_schedule.h"
#include "fsdpp/train/parallel_dims.h"

using fsdpp::ConfigError;
using fsdpp::ShardingStrategy;
using fsdpp::train::TrainConfig;
namespace fs = std::filesystem;

namespace {

// The smallest valid config is data.path plus a length of training (max_steps or
// num_train_epochs, which default to "unset"): the YAML below and this override, which the
// helpers put before the test's own overrides.
const std::string kMinimal = "data:\n  path: corpus.txt\n";
const std::string kLength = "training.max_steps=10";

std::vector<std::string> with_length(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), kLength);
  return overrides;
}

TrainConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return TrainConfig::from_yaml_string(yaml, with_length(overrides), "test.yaml");
}

// The message of the ConfigError that f throws ("" and a failure when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

std::string yaml_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse(yaml, overrides); });
}

// Every part must appear in the message, which starts with "[config]".
void expect_message(const std::string& msg, const std::vector<std::string>& parts) {
  EXPECT_EQ(msg.rfind("[config] ", 0), 0u) << msg;
  for (const auto& p : parts) {
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' is not in: " << msg;
  }
}

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, which crashes.
void remove_tree(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (const auto& e : fs::directory_iterator(p)) remove_tree(e.path());
  }
  fs::remove(p, ec);
}

class ConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("fsdpp_test_config_" + std::to_string(::getpid()) + "_" + info->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { remove_tree(dir_); }
  fs::path write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

// The repository's source directory: FSDPP_SOURCE_DIR when the build defines it, else three
// levels above this file (tests/unit/test_config.cpp).
fs::path source_dir() {
#ifdef FSDPP_SOURCE_DIR
  return fs::path(FSDPP_SOURCE_DIR);
#else
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
#endif
}

}  // namespace

TEST(Config, Defaults) {
  const auto cfg = parse(kMinimal);
  TrainConfig expected;
  expected.data.path = "corpus.txt";
  expected.training.max_steps = 10;
  EXPECT_EQ(cfg.to_yaml(), expected.to_yaml());
  EXPECT_EQ(cfg.model.vocab_size, 0);
  EXPECT_EQ(cfg.model.dim, 128);
  EXPECT_EQ(cfg.data.tokenizer, "byte");
  EXPECT_EQ(cfg.training.fsdp, ShardingStrategy::FULL_SHARD);
  EXPECT_EQ(cfg.training.fsdp_config.auto_wrap_policy, "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(cfg.training.fsdp_config.transformer_layer_cls_to_wrap,
            std::vector<std::string>{"TransformerBlock"});
  EXPECT_EQ(cfg.training.per_device_train_batch_size, 8);
  EXPECT_DOUBLE_EQ(cfg.training.learning_rate, 3e-4);
  EXPECT_EQ(TrainConfig{}.training.max_steps, -1);
  EXPECT_EQ(cfg.training.seed, 42u);
  EXPECT_EQ(cfg.training.sample_prompt, "\n");
  // Empty sections are allowed.
  EXPECT_NO_THROW(parse("model:\ndata:\n  path: x\ntraining:\n"));
}

TEST(Config, FullYamlEveryKey) {
  const std::string yaml = R"(
model:
  vocab_size: 1024
  dim: 96
  n_layers: 3
  n_heads: 6
  n_kv_heads: 3
  ffn_hidden: 200
  multiple_of: 16
  max_seq_len: 64
  norm_eps: 1.0e-6
  rope_theta: 500000
  init_std: 0.01
  tie_embeddings: true
data:
  path: /data/corpus
  tokenizer: sentencepiece
  tokenizer_model: tok/sp.model
  tokenizer_vocab_size: 1000
  seq_len: 48
  val_fraction: 0.1
  cache_dir: /tmp/cache
training:
  fsdp: shard_grad_op
  fsdp_config:
    fsdp_auto_wrap_policy: SIZE_BASED_WRAP
    fsdp_transformer_layer_cls_to_wrap: [TransformerBlock, Attention]
    fsdp_min_num_params: 1e6
    fsdp_backward_prefetch: NO_PREFETCH
    fsdp_forward_prefetch: false
    fsdp_state_dict_type: FULL_STATE_DICT
    fsdp_offload_params: false
  gradient_checkpointing: false
  bf16: false
  fp16: false
  per_device_train_batch_size: 4
  per_device_eval_batch_size: 2
  gradient_accumulation_steps: 3
  learning_rate: 1e-3
  warmup_steps: 7
  weight_decay: 0.1
  adam_beta1: 0.8
  adam_beta2: 0.99
  adam_epsilon: 1e-6
  max_grad_norm: 0.5
  max_steps: -1
  num_train_epochs: 2.5
  logging_steps: 5
  eval_steps: 50
  eval_max_batches: 4
  save_steps: 100
  save_total_limit: 3
  resume_from_checkpoint: latest
  seed: 18446744073709551615
  output_dir: runs/full
  lr_scheduler_type: linear
  min_lr_ratio: 0.0
  sample_tokens: 0
  sample_prompt: "ROMEO:"
  sample_temperature: 0
  sample_top_k: 40
)";
  const auto c = TrainConfig::from_yaml_string(yaml);
  const auto& m = c.model;
  EXPECT_EQ(m.vocab_size, 1024);
  EXPECT_EQ(m.dim, 96);
  EXPECT_EQ(m.n_layers, 3);
  EXPECT_EQ(m.n_heads, 6);
  EXPECT_EQ(m.n_kv_heads, 3);
  EXPECT_EQ(m.ffn_hidden, 200);
  EXPECT_EQ(m.multiple_of, 16);
  EXPECT_EQ(m.max_seq_len, 64);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000);
  EXPECT_DOUBLE_EQ(m.init_std, 0.01);
  EXPECT_TRUE(m.tie_embeddings);
  const auto& d = c.data;
  EXPECT_EQ(d.path, "/data/corpus");
  EXPECT_EQ(d.tokenizer, "sentencepiece");
  EXPECT_EQ(d.tokenizer_model, "tok/sp.model");
  EXPECT_EQ(d.tokenizer_vocab_size, 1000);
  EXPECT_EQ(d.seq_len, 48);
  EXPECT_DOUBLE_EQ(d.val_fraction, 0.1);
  EXPECT_EQ(d.cache_dir, "/tmp/cache");
  const auto& t = c.training;
  EXPECT_EQ(t.fsdp, ShardingStrategy::SHARD_GRAD_OP);
  EXPECT_EQ(t.fsdp_config.auto_wrap_policy, "SIZE_BASED_WRAP");
  EXPECT_EQ(t.fsdp_config.transformer_layer_cls_to_wrap,
            (std::vector<std::string>{"TransformerBlock", "Attention"}));
  EXPECT_EQ(t.fsdp_config.min_num_params, 1000000);
  EXPECT_EQ(t.fsdp_config.backward_prefetch, "NO_PREFETCH");
  EXPECT_FALSE(t.fsdp_config.forward_prefetch);
  EXPECT_EQ(t.fsdp_config.state_dict_type, "FULL_STATE_DICT");
  EXPECT_FALSE(t.fsdp_config.offload_params);
  EXPECT_FALSE(t.gradient_checkpointing);
  EXPECT_FALSE(t.bf16);
  EXPECT_FALSE(t.fp16);
  EXPECT_EQ(t.per_device_train_batch_size, 4);
  EXPECT_EQ(t.per_device_eval_batch_size, 2);
  EXPECT_EQ(t.gradient_accumulation_steps, 3);
  EXPECT_DOUBLE_EQ(t.learning_rate, 1e-3);
  EXPECT_EQ(t.warmup_steps, 7);
  EXPECT_DOUBLE_EQ(t.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(t.adam_beta1, 0.8);
  EXPECT_DOUBLE_EQ(t.adam_beta2, 0.99);
  EXPECT_DOUBLE_EQ(t.adam_epsilon, 1e-6);
  EXPECT_DOUBLE_EQ(t.max_grad_norm, 0.5);
  EXPECT_EQ(t.max_steps, -1);
  EXPECT_DOUBLE_EQ(t.num_train_epochs, 2.5);
  EXPECT_EQ(t.logging_steps, 5);
  EXPECT_EQ(t.eval_steps, 50);
  EXPECT_EQ(t.eval_max_batches, 4);
  EXPECT_EQ(t.save_steps, 100);
  EXPECT_EQ(t.save_total_limit, 3);
  EXPECT_EQ(t.resume_from_checkpoint, "latest");
  EXPECT_EQ(t.seed, 18446744073709551615ull);
  EXPECT_EQ(t.output_dir, "runs/full");
  EXPECT_EQ(t.lr_scheduler_type, "linear");
  EXPECT_DOUBLE_EQ(t.min_lr_ratio, 0.0);
  EXPECT_EQ(t.sample_tokens, 0);
  EXPECT_EQ(t.sample_prompt, "ROMEO:");
  EXPECT_DOUBLE_EQ(t.sample_temperature, 0);
  EXPECT_EQ(t.sample_top_k, 40);
  // Every key of to_yaml's output was given above: the full YAML spells the whole schema.
  EXPECT_EQ(TrainConfig::from_yaml_string(c.to_yaml()).to_yaml(), c.to_yaml());
}

TEST(Config, HuggingFaceSpellings) {
  // A comma-separated class list, keys without the fsdp_ prefix, enums in lower case and the
  // Trainer's space-separated `fsdp` option string.
  const auto c = parse(kMinimal + R"(
training:
  fsdp: "hybrid_shard auto_wrap"
  fsdp_config:
    transformer_layer_cls_to_wrap: "TransformerBlock, LlamaDecoderLayer,"
    auto_wrap_policy: transformer_based_wrap
    fsdp_state_dict_type: full_state_dict
)");
  EXPECT_EQ(c.training.fsdp, ShardingStrategy::HYBRID_SHARD);
  EXPECT_EQ(c.training.fsdp_config.transformer_layer_cls_to_wrap,
            (std::vector<std::string>{"TransformerBlock", "LlamaDecoderLayer"}));
  EXPECT_EQ(c.training.fsdp_config.auto_wrap_policy, "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(c.training.fsdp_config.state_dict_type, "FULL_STATE_DICT");
  EXPECT_EQ(parse(kMinimal + "training:\n  fsdp: [no_shard, auto_wrap]\n").training.fsdp,
            ShardingStrategy::NO_SHARD);
  EXPECT_EQ(parse(kMinimal + "training:\n  fsdp: ZERO1\n").training.fsdp,
            ShardingStrategy::ZERO1);
  // Both spellings of one key at once is an error.
  expect_message(yaml_error(kMinimal + "training:\n  fsdp_config:\n    min_num_params: 5\n"
                                       "    fsdp_min_num_params: 6\n"),
                 {"training.fsdp_config.fsdp_min_num_params is given twice", "test.yaml, line 6",
                  "'fsdp_min_num_params' and 'min_num_params' are the same key"});
  expect_message(yaml_error(kMinimal + "training:\n  seed: 1\n  seed: 2\n"),
                 {"training.seed is given twice"});
}

// Hugging Face's warmup_ratio (TrainingArguments.get_warmup_steps): ceil(ratio x the run's
// steps), warmup_steps > 0 winning.
TEST(Config, WarmupRatioAsHuggingFaceCountsIt) {
  using fsdpp::train::make_lr_schedule;
  EXPECT_EQ(make_lr_schedule(parse(kMinimal, {"training.warmup_ratio=0.1"}).training, 95).warmup_steps, 10);
  EXPECT_EQ(make_lr_schedule(parse(kMinimal, {"training.warmup_ratio=0.1"}).training, 100).warmup_steps, 10);
  EXPECT_EQ(make_lr_schedule(parse(kMinimal, {"training.warmup_ratio=0.1", "training.warmup_steps=3"}).training, 100).warmup_steps, 3);
  EXPECT_EQ(make_lr_schedule(parse(kMinimal).training, 100).warmup_steps, 0);
  expect_message(yaml_error(kMinimal, {"training.warmup_ratio=1.5"}),
                 {"training.warmup_ratio=1.5", "expected a fraction of the run's steps in [0, 1]"});
}

TEST(Config, Overrides) {
  const std::string yaml = kMinimal + R"(
training:
  per_device_train_batch_size: 16
  fsdp_config:
    min_num_params: 1000
)";
  const auto c = parse(
      yaml, {
                "training.per_device_train_batch_size=4",       // scalar, replaces the file's
                "training.learning_rate = 1e-2",                // spaces around '='
                "model.n_layers=2",                             // a section the file lacks
                "training.fsdp_config.fsdp_min_num_params=77",  // nested, other spelling
                "training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[A, B]",  // a list
                "training.fsdp=no_shard",
                "training.seed=1",
                "training.seed=2",  // the last one wins
                "data.path=/tmp/my corpus: v2.txt",  // strings are taken literally
                "training.sample_prompt=\"\\n\\n\"",  // unless quoted
                "data.cache_dir=",                  // empty
                "training.fsdp_config={fsdp_auto_wrap_policy: size_based_wrap}",  // a map
            });
  EXPECT_EQ(c.training.per_device_train_batch_size, 4);
  EXPECT_DOUBLE_EQ(c.training.learning_rate, 1e-2);
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.training.fsdp_config.min_num_params, 77);
  EXPECT_EQ(c.training.fsdp_config.transformer_layer_cls_to_wrap,
            (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(c.training.fsdp, ShardingStrategy::NO_SHARD);
  EXPECT_EQ(c.training.seed, 2u);
  EXPECT_EQ(c.data.path, "/tmp/my corpus: v2.txt");
  EXPECT_EQ(c.training.sample_prompt, "\n\n");
  EXPECT_EQ(c.data.cache_dir, "");
  EXPECT_EQ(c.training.fsdp_config.auto_wrap_policy, "SIZE_BASED_WRAP");
  // A comma-separated list works as an override too.
  EXPECT_EQ(parse(kMinimal, {"training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=X,Y"})
                .training.fsdp_config.transformer_layer_cls_to_wrap,
            (std::vector<std::string>{"X", "Y"}));
}

TEST(Config, ToYamlRoundTrip) {
  TrainConfig c;
  c.model.vocab_size = 300;
  c.model.norm_eps = 1e-6;
  c.model.rope_theta = 12345.5;
  c.model.tie_embeddings = true;
  c.data.path = "dir with spaces/a: b #c";
  c.data.tokenizer = "sentencepiece";
  c.data.tokenizer_vocab_size = 300;
  c.data.val_fraction = 0.1 + 0.2;  // not a short decimal
  c.data.cache_dir = "";
  c.training.fsdp = ShardingStrategy::HYBRID_SHARD_ZERO2;
  c.training.fsdp_config.transformer_layer_cls_to_wrap = {"TransformerBlock", "x, y", "null"};
  c.training.learning_rate = 3e-4;
  c.training.seed = 18446744073709551615ull;
  c.training.max_steps = 1000;
  c.training.output_dir = "true";
  c.training.sample_prompt = "\n\t\"quoted\" 'single' é";
  c.training.lr_scheduler_type = "constant";
  const std::string yaml = c.to_yaml();
  const auto back = TrainConfig::from_yaml_string(yaml);
  EXPECT_EQ(back.to_yaml(), yaml);
  EXPECT_EQ(back.model.vocab_size, 300);
  EXPECT_EQ(back.model.norm_eps, 1e-6);
  EXPECT_EQ(back.model.rope_theta, 12345.5);
  EXPECT_TRUE(back.model.tie_embeddings);
  EXPECT_EQ(back.data.path, c.data.path);
  EXPECT_EQ(back.data.val_fraction, c.data.val_fraction);  // bit-exact
  EXPECT_EQ(back.training.fsdp, ShardingStrategy::HYBRID_SHARD_ZERO2);
  EXPECT_EQ(back.training.fsdp_config.transformer_layer_cls_to_wrap,
            c.training.fsdp_config.transformer_layer_cls_to_wrap);
  EXPECT_EQ(back.training.learning_rate, 3e-4);
  EXPECT_EQ(back.training.seed, c.training.seed);
  EXPECT_EQ(back.training.output_dir, "true");
  EXPECT_EQ(back.training.sample_prompt, c.training.sample_prompt);
  // The output reads as people write it.
  EXPECT_NE(yaml.find("fsdp: hybrid_shard_zero2\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  learning_rate: 0.0003\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  adam_epsilon: 1e-8\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  rope_theta: 12345.5\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  weight_decay: 0.0\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"), std::string::npos)
      << yaml;
}

TEST(Config, ErrorUnknownKey) {
  expect_message(yaml_error(kMinimal + "training:\n  learnig_rate: 0.1\n"),
                 {"unknown key 'training.learnig_rate'", "test.yaml, line 4",
                  "did you mean 'learning_rate'?", "Accepted keys in training:",
                  "per_device_train_batch_size"});
  expect_message(yaml_error(kMinimal + "trainig:\n  seed: 1\n"),
                 {"unknown key 'trainig'", "did you mean 'training'?", "model, data, training"});
  // A key of another section: suggests its full path.
  expect_message(yaml_error(kMinimal + "model:\n  seed: 1\n"),
                 {"unknown key 'model.seed'", "did you mean 'training.seed'?"});
  expect_message(yaml_error(kMinimal + "training:\n  fsdp_min_num_params: 1\n"),
                 {"did you mean 'training.fsdp_config.fsdp_min_num_params'?"});
  expect_message(yaml_error(kMinimal + "training:\n  fsdp_config:\n    fsdp_use_orig_params: "
                                       "true\n"),
                 {"unknown key 'training.fsdp_config.fsdp_use_orig_params'",
                  "Accepted keys in training.fsdp_config: fsdp_auto_wrap_policy"});
  expect_message(yaml_error(kMinimal + "training:\n  batch_size: 4\n"),
                 {"did you mean 'training.per_device_train_batch_size'?"});
  expect_message(yaml_error(kMinimal + "training:\n  warmup: 4\n"),
                 {"did you mean 'warmup_steps'?"});
  // Hugging Face's LlamaConfig names.
  expect_message(yaml_error(kMinimal + "model:\n  num_hidden_layers: 4\n"),
                 {"did you mean 'model.n_layers'?"});
}

TEST(Config, ErrorWrongType) {
  expect_message(yaml_error(kMinimal + "training:\n  per_device_train_batch_size: abc\n"),
                 {"training.per_device_train_batch_size='abc'", "test.yaml, line 4",
                  "expected an integer"});
  expect_message(yaml_error(kMinimal + "training:\n  per_device_train_batch_size: 2.5\n"),
                 {"training.per_device_train_batch_size='2.5'", "expected an integer"});
  expect_message(yaml_error(kMinimal + "training:\n  learning_rate: {a: 1}\n"),
                 {"training.learning_rate is a map", "expected a number"});
  expect_message(yaml_error(kMinimal + "model:\n  dim: [1, 2]\n"),
                 {"model.dim is a list", "expected an integer"});
  expect_message(yaml_error(kMinimal + "training:\n  learning_rate:\n"),
                 {"training.learning_rate is empty", "expected a number"});
  expect_message(yaml_error(kMinimal + "training:\n  seed: -1\n"),
                 {"training.seed='-1'", "expected an integer >= 0"});
  expect_message(yaml_error(kMinimal + "training:\n  output_dir: [a]\n"),
                 {"training.output_dir is a list", "expected a string"});
  expect_message(yaml_error(kMinimal + "training: 5\n"),
                 {"training='5' (test.yaml, line 3)", "expected a map with the keys of training"});
  expect_message(yaml_error(kMinimal + "training:\n  fsdp: full_shard shard_grad_op\n"),
                 {"training.fsdp='full_shard shard_grad_op'", "exactly one strategy"});
  expect_message(yaml_error(kMinimal + "training:\n  fsdp: zero4\n"),
                 {"training.fsdp='zero4'", "full_shard, shard_grad_op, zero1, no_shard"});
  expect_message(yaml_error(kMinimal + "training:\n  fsdp_config:\n    "
                                       "fsdp_transformer_layer_cls_to_wrap: {a: 1}\n"),
                 {"training.fsdp_config.fsdp_transformer_layer_cls_to_wrap is a map",
                  "a list of names or a comma-separated string"});
}

TEST(Config, ErrorBoolSpelledYes) {
  for (const char* v : {"yes", "no", "on", "1", "y"}) {
    expect_message(yaml_error(kMinimal + "model:\n  tie_embeddings: " + v + "\n"),
                   {std::string("model.tie_embeddings='") + v + "'", "expected true or false"});
  }
  EXPECT_TRUE(parse(kMinimal + "model:\n  tie_embeddings: True\n").model.tie_embeddings);
}

TEST(Config, ErrorOutOfRange) {
  struct Case {
    std::string override_;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"training.per_device_train_batch_size=0",
       {"training.per_device_train_batch_size=0", "expected >= 1"}},
      {"training.per_device_eval_batch_size=-2",
       {"training.per_device_eval_batch_size=-2", "expected >= 1"}},
      {"training.gradient_accumulation_steps=0",
       {"training.gradient_accumulation_steps=0", "expected >= 1"}},
      {"training.learning_rate=0", {"training.learning_rate=0", "expected a finite number > 0"}},
      {"training.learning_rate=.inf",
       {"training.learning_rate=inf", "expected a finite number > 0"}},
      {"training.learning_rate=.nan",
       {"training.learning_rate=nan", "expected a finite number > 0"}},
      {"training.warmup_steps=-1", {"training.warmup_steps=-1", "expected >= 0"}},
      {"data.val_fraction=1", {"data.val_fraction=1", "0 <= val_fraction < 1"}},
      {"data.val_fraction=-0.1", {"data.val_fraction=-0.1", "0 <= val_fraction < 1"}},
      {"training.max_grad_norm=-1", {"training.max_grad_norm=-1", "0: no clipping"}},
      {"data.seq_len=0", {"data.seq_len=0", "expected >= 1"}},
      {"data.seq_len=129",
       {"data.seq_len=129", "model.max_seq_len=128", "1 <= seq_len <= max_seq_len"}},
      {"model.n_heads=3", {"model.dim=128 is not divisible by n_heads=3"}},
      {"model.n_kv_heads=3", {"model.n_kv_heads=3", "n_heads % n_kv_heads == 0"}},
      {"model.dim=0", {"model.dim=0"}},
      {"model.vocab_size=-1", {"model.vocab_size=-1", "expected 0"}},
      {"model.vocab_size=100", {"model.vocab_size=100", "byte tokenizer's 256"}},
      {"training.max_steps=0", {"training.max_steps=0", "or -1"}},
      {"training.num_train_epochs=-1", {"training.num_train_epochs=-1", ">= 0"}},
      {"training.save_total_limit=-1", {"training.save_total_limit=-1", "expected >= 0"}},
      {"training.logging_steps=0", {"training.logging_steps=0", "expected >= 1"}},
      {"training.adam_beta2=1", {"training.adam_beta2=1", "0 <= adam_beta2 < 1"}},
      {"training.min_lr_ratio=2", {"training.min_lr_ratio=2", "0 <= min_lr_ratio <= 1"}},
      {"training.output_dir=", {"training.output_dir is empty"}},
      {"data.path=", {"data.path is empty", "a text file or a directory"}},
      {"data.tokenizer=bpe", {"data.tokenizer='bpe'", "expected one of byte, sentencepiece"}},
      {"data.tokenizer_model=x.model",
       {"data.tokenizer_model='x.model' is set but data.tokenizer='byte'"}},
      {"training.lr_scheduler_type=cosine_with_restarts",
       {"training.lr_scheduler_type='cosine_with_restarts'", "cosine, linear, constant"}},
      {"training.fsdp_config.fsdp_auto_wrap_policy=FOO",
       {"training.fsdp_config.fsdp_auto_wrap_policy='FOO'",
        "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP"}},
      {"training.fsdp_config.fsdp_backward_prefetch=EARLY",
       {"training.fsdp_config.fsdp_backward_prefetch='EARLY'", "BACKWARD_PRE, BACKWARD_POST"}},
      {"training.fsdp_config.fsdp_state_dict_type=torch",
       {"training.fsdp_config.fsdp_state_dict_type='TORCH'",
        "FULL_STATE_DICT, SHARDED_STATE_DICT, LOCAL_STATE_DICT"}},
      {"training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[]",
       {"fsdp_transformer_layer_cls_to_wrap is empty", "TRANSFORMER_BASED_WRAP"}},
      {"training.fsdp_config.fsdp_min_num_params=0",
       {"training.fsdp_config.fsdp_min_num_params=0", "expected >= 1"}},
      {"training.sample_prompt=\"\"", {"training.sample_prompt is empty", "sample_tokens=200"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.override_);
    expect_message(yaml_error(kMinimal, {c.override_}), c.parts);
  }
  // Cross-field checks that need two keys.
  expect_message(yaml_error(kMinimal, {"training.bf16=true", "training.fp16=true"}),
                 {"training.bf16=true and training.fp16=true", "at most one"});
  expect_message(
      yaml_error(kMinimal, {"training.max_steps=-1", "training.num_train_epochs=0"}),
      {"training.max_steps=-1 and training.num_train_epochs=0", "max_steps >= 1"});
  expect_message(yaml_error(kMinimal, {"data.tokenizer=sentencepiece", "model.vocab_size=300",
                                       "data.tokenizer_vocab_size=512"}),
                 {"model.vocab_size=300 is smaller than data.tokenizer_vocab_size=512"});
  // Training for epochs alone is fine.
  EXPECT_NO_THROW(parse(kMinimal, {"training.max_steps=-1", "training.num_train_epochs=1"}));
}

TEST(Config, MemoryAndSpeedOptions) {
  auto c = parse(kMinimal, {"training.bf16=true", "training.gradient_checkpointing=true",
                            "training.gradient_checkpointing_every=2",
                            "training.fsdp_config.fsdp_backward_prefetch=backward_post",
                            "training.fsdp_config.fsdp_forward_prefetch=true",
                            "training.fsdp_config.fsdp_limit_all_gathers=false"});
  EXPECT_TRUE(c.training.bf16);
  EXPECT_TRUE(c.training.gradient_checkpointing);
  EXPECT_EQ(c.training.gradient_checkpointing_every, 2);
  EXPECT_EQ(c.training.fsdp_config.backward_prefetch, "BACKWARD_POST");
  EXPECT_TRUE(c.training.fsdp_config.forward_prefetch);
  EXPECT_FALSE(c.training.fsdp_config.limit_all_gathers);
  EXPECT_TRUE(parse(kMinimal, {"training.fsdp=full_shard offload"}).training.fsdp_config.offload_params);
  EXPECT_TRUE(parse(kMinimal, {"training.fp16=true"}).training.fp16);
  expect_message(yaml_error(kMinimal, {"training.gradient_checkpointing_every=0"}),
                 {"training.gradient_checkpointing_every=0", ">= 1"});
}

TEST(Config, ErrorBadDocument) {
  expect_message(yaml_error(""), {"test.yaml is empty", "model:, data:, training: and parallelism:"});
  expect_message(yaml_error("# only a comment\n\n"), {"test.yaml is empty"});
  expect_message(yaml_error(std::string("\x7f" "ELF\x02\x01\x01\0\0\0", 10)),
                 {"test.yaml is not a text file", "byte 0x7f at offset 0"});
  expect_message(yaml_error("data:\n  path: a\x01" "b\n"),
                 {"test.yaml is not a text file", "byte 0x01 at offset 15"});
  expect_message(yaml_error("\xff\xfe garbage"), {"test.yaml is not a text file", "0xff"});
  expect_message(yaml_error("just a sentence"),
                 {"test.yaml: the top level is a scalar 'just a sentence'", "a YAML map"});
  expect_message(yaml_error("- a\n- b\n"), {"test.yaml: the top level is a list"});
  expect_message(yaml_error("model: [\n"), {"test.yaml is not valid YAML", "line "});
  expect_message(yaml_error(kMinimal + "---\n" + kMinimal), {"test.yaml holds 2 YAML documents"});
  expect_message(yaml_error(kMinimal + "[a]: 1\n"), {"a key in the top level is not a name"});
}

TEST(Config, ErrorOverrides) {
  expect_message(yaml_error(kMinimal, {"training.learning_rate"}),
                 {"override 'training.learning_rate' has no '='", "key.path=value"});
  expect_message(yaml_error(kMinimal, {"training.learnig_rate=1"}),
                 {"unknown key 'training.learnig_rate'", "in override 'training.learnig_rate=1'",
                  "did you mean 'learning_rate'?"});
  expect_message(yaml_error(kMinimal, {"traning.seed=1"}),
                 {"unknown key 'traning'", "override 'traning.seed=1'", "'training'"});
  expect_message(yaml_error(kMinimal, {"training.seed.x=1"}),
                 {"override 'training.seed.x=1'", "training.seed is a value"});
  expect_message(yaml_error(kMinimal, {"training..seed=1"}), {"empty key name"});
  expect_message(yaml_error(kMinimal, {"training.per_device_train_batch_size=abc"}),
                 {"training.per_device_train_batch_size='abc'",
                  "(override 'training.per_device_train_batch_size=abc')", "expected an integer"});
  expect_message(yaml_error(kMinimal, {"model.dim=[1"}),
                 {"override 'model.dim=[1'", "not valid YAML"});
  expect_message(yaml_error(kMinimal, {"training.fsdp_config={bogus: 1}"}),
                 {"unknown key 'training.fsdp_config.bogus'", "override"});
  expect_message(yaml_error(kMinimal, {"training=5"}),
                 {"training='5'", "override 'training=5'", "expected a map"});
}

TEST_F(ConfigFiles, FromFile) {
  const auto p = write("c.yaml", kMinimal + "training:\n  seed: 9\n  num_train_epochs: 1\n");
  const auto c = TrainConfig::from_file(p.string(), {"training.max_steps=3"});
  EXPECT_EQ(c.training.seed, 9u);
  EXPECT_EQ(c.training.max_steps, 3);
  // Errors name the file.
  const auto bad = write("bad.yaml", kMinimal + "training:\n  seed: x\n");
  expect_message(error_of([&] { TrainConfig::from_file(bad.string()); }),
                 {bad.string() + ", line 4", "training.seed='x'"});
  const auto empty = write("empty.yaml", "");
  expect_message(error_of([&] { TrainConfig::from_file(empty.string()); }),
                 {empty.string() + " is empty"});
  const auto missing = (dir_ / "missing.yaml").string();
  expect_message(error_of([&] { TrainConfig::from_file(missing); }),
                 {"config file '" + missing + "' does not exist"});
  expect_message(error_of([&] { TrainConfig::from_file(dir_.string()); }),
                 {"config file '" + dir_.string() + "' is not a regular file"});
}

TEST_F(ConfigFiles, ResolveDataFiles) {
  fs::create_directories(dir_ / "corpus" / "sub");
  write("corpus/b", "b");
  write("corpus/a", "a");
  write("corpus/a.dat", "index");
  write("corpus/c.u8", "c");
  write("corpus/z.txt", "z");
  fs::create_symlink(dir_ / "corpus" / "a", dir_ / "corpus" / "link");
  const auto files = fsdpp::train::resolve_data_files((dir_ / "corpus").string());
  EXPECT_EQ(files, (std::vector<std::string>{(dir_ / "corpus" / "a").string(),
                                             (dir_ / "corpus" / "b").string(),
                                             (dir_ / "corpus" / "z.txt").string()}));
  const auto one = (dir_ / "corpus" / "a.dat").string();  // a file named directly is used
  EXPECT_EQ(fsdpp::train::resolve_data_files(one), std::vector<std::string>{one});
  expect_message(error_of([&] { fsdpp::train::resolve_data_files((dir_ / "nope").string()); }),
                 {"data.path='" + (dir_ / "nope").string() + "' does not exist"});
  expect_message(
      error_of([&] { fsdpp::train::resolve_data_files((dir_ / "corpus" / "sub").string()); }),
      {"is a directory without text files", "*.dat"});
}

TEST(Config, LlamaConfig) {
  auto c = parse(kMinimal, {"training.seed=5", "model.n_kv_heads=2"});
  auto l = c.llama_config(256);
  EXPECT_EQ(l.vocab_size, 256);
  EXPECT_EQ(l.seed, 5u);
  EXPECT_EQ(l.dim, 128);
  EXPECT_EQ(l.n_kv_heads, 2);
  EXPECT_EQ(l.max_seq_len, 128);
  c.model.vocab_size = 512;
  EXPECT_EQ(c.llama_config(256).vocab_size, 512);
  expect_message(error_of([&] { c.llama_config(1000); }),
                 {"model.vocab_size=512 is smaller than the tokenizer's vocabulary (1000 tokens)"});
}

TEST(Config, RepositoryConfigsParse) {
  const fs::path dir = source_dir() / "configs";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    names.push_back(e.path().filename().string());
    SCOPED_TRACE(e.path().string());
    TrainConfig c;
    ASSERT_NO_THROW(c = TrainConfig::from_file(e.path().string())) << [&] {
      try {
        TrainConfig::from_file(e.path().string());
      } catch (const std::exception& ex) {
        return std::string(ex.what());
      }
      return std::string();
    }();
    EXPECT_EQ(TrainConfig::from_yaml_string(c.to_yaml()).to_yaml(), c.to_yaml());
  }
  for (const char* required : {"default.yaml", "tinyshakespeare.yaml", "llama-small.yaml"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
  const auto def = TrainConfig::from_file((dir / "default.yaml").string());
  EXPECT_EQ(def.training.fsdp, ShardingStrategy::FULL_SHARD);
  EXPECT_EQ(def.data.tokenizer, "byte");
  EXPECT_EQ(def.data.path, "/usr/share/games/fortunes");
  const auto small = TrainConfig::from_file((dir / "llama-small.yaml").string());
  EXPECT_EQ(small.data.tokenizer, "sentencepiece");
  EXPECT_EQ(small.training.fsdp_config.auto_wrap_policy, "SIZE_BASED_WRAP");
}

TEST(Config, HandsOutWhatTheTrainerRuns) {
  const auto c = parse(kMinimal, {"training.bf16=true", "training.fsdp=hybrid_shard",
                                  "training.fsdp_config.fsdp_backward_prefetch=backward_post",
                                  "training.fsdp_config.fsdp_forward_prefetch=true",
                                  "training.fsdp_config.fsdp_limit_all_gathers=false",
                                  "training.fsdp_config.fsdp_offload_params=true",
                                  "training.fsdp_config.fsdp_state_dict_type=full_state_dict",
                                  "training.fsdp_config.fsdp_hybrid_shard_group_size=2",
                                  "training.lr_scheduler_type=linear"});
  const auto f = c.fully_shard_options(nullptr);
  EXPECT_EQ(f.strategy, ShardingStrategy::HYBRID_SHARD);
  EXPECT_EQ(f.mp_policy.param_dtype, at::kBFloat16);
  EXPECT_EQ(f.mp_policy.reduce_dtype, at::kFloat);
  EXPECT_TRUE(f.offload_policy.offload_params);
  EXPECT_EQ(f.backward_prefetch, fsdpp::BackwardPrefetch::BACKWARD_POST);
  EXPECT_EQ(f.forward_prefetch, 1);
  EXPECT_EQ(f.limit_all_gathers, 0);
  // The estimate models the same run.
  const auto e = c.estimate_options(fsdpp::train::parallel_dims(c, /*world_size=*/4, /*local_world_size=*/8));
  EXPECT_EQ(e.strategy, ShardingStrategy::HYBRID_SHARD);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.shard_group_size, 2);
  EXPECT_EQ(e.param_dtype, fsdpp::EstimateDType::BF16);
  EXPECT_EQ(e.reduce_dtype, fsdpp::EstimateDType::FP32);
  EXPECT_TRUE(e.cpu_offload);
  EXPECT_EQ(e.backward_prefetch, 1);
  EXPECT_TRUE(e.backward_prefetch_post);
  EXPECT_EQ(e.forward_prefetch, 1);
  EXPECT_EQ(e.limit_all_gathers, 0);
  EXPECT_EQ(e.batch, 8);
  EXPECT_EQ(e.seq_len, 128);
  EXPECT_EQ(c.state_dict_options().type, fsdpp::state::StateDictType::FULL);
  EXPECT_EQ(fsdpp::train::make_lr_schedule(c.training, 100).type, "linear");
  EXPECT_EQ(fsdpp::train::make_lr_schedule(c.training, 100).total_steps, 100);
  EXPECT_TRUE(c.wrap_policy());
  EXPECT_FALSE(parse(kMinimal, {"training.fsdp_config.fsdp_auto_wrap_policy=NO_WRAP"}).wrap_policy());
  // Defaults: fully_shard's own bound on gathers in flight, one unit prefetched in backward,
  // shard groups of LOCAL_WORLD_SIZE.
  const auto d = parse(kMinimal);
  EXPECT_EQ(d.fully_shard_options(nullptr).limit_all_gathers,
            fsdpp::FullyShardOptions{}.limit_all_gathers);
  EXPECT_EQ(d.fully_shard_options(nullptr).backward_prefetch,
            fsdpp::BackwardPrefetch::BACKWARD_PRE);
  EXPECT_FALSE(d.fully_shard_options(nullptr).mp_policy.param_dtype.has_value());
  EXPECT_EQ(d.estimate_options().limit_all_gathers, fsdpp::FullyShardOptions{}.limit_all_gathers);
  EXPECT_EQ(d.estimate_options().backward_prefetch, 1);
  EXPECT_EQ(d.estimate_options().param_dtype, fsdpp::EstimateDType::FP32);
  EXPECT_EQ(d.hybrid_shard_group_size(8), 8);
  EXPECT_EQ(d.state_dict_options().type, fsdpp::state::StateDictType::SHARDED);
}

TEST(Config, ChoicesAreTypedWhenRead) {
  // A misspelt name is refused where it is read, naming the accepted ones and the nearest.
  expect_message(yaml_error(kMinimal + "training:\n  lr_scheduler_type: cosin\n"),
                 {"training.lr_scheduler_type='cosin' (test.yaml, line 4)",
                  "expected one of cosine, linear, constant", "did you mean 'cosine'?"});
  expect_message(yaml_error(kMinimal, {"training.save_strategy=step"}),
                 {"training.save_strategy='step'", "steps, epoch, no", "did you mean 'steps'?"});
  // The value is the enum; code may still assign and compare names.
  auto c = parse(kMinimal, {"training.save_strategy=epoch"});
  EXPECT_EQ(c.training.save_strategy, fsdpp::train::SaveStrategy::EPOCH);
  EXPECT_EQ(c.training.save_strategy, "epoch");
  c.training.fsdp_config.backward_prefetch = "no_prefetch";
  EXPECT_EQ(c.training.fsdp_config.backward_prefetch, fsdpp::BackwardPrefetch::NONE);
  EXPECT_NE(c.to_yaml().find("fsdp_backward_prefetch: NO_PREFETCH\n"), std::string::npos);
  expect_message(error_of([&] { c.training.lr_scheduler_type = "cosine_with_restarts"; }),
                 {"unknown learning-rate schedule 'cosine_with_restarts'",
                  "expected one of cosine, linear, constant"});
}

// The degrees are resolved once: what fsdpp-train runs (train::parallel_dims) is what its memory
// check estimates (TrainConfig::estimate_options(dims)) and what fsdpp-estimate plays from the
// same keys on the same world and nodes (estimate_parallel_dims over the keys' options), HSDP's
// default shard group included.
TEST(Config, DegreesResolvedOnce) {
  const std::string base = "data: {path: x}\n";
  struct Case {
    std::vector<std::string> keys;
    int world, node;
  };
  const std::vector<Case> cases = {
      {{}, 4, 4},
      {{"parallelism.tensor_parallel_degree=2"}, 8, 8},
      {{"training.fsdp=hybrid_shard"}, 8, 4},
      {{"training.fsdp=hybrid_shard"}, 16, 8},
      {{"training.fsdp=hybrid_shard", "training.fsdp_config.fsdp_hybrid_shard_group_size=2"}, 8, 4},
      {{"training.fsdp=hybrid_shard", "parallelism.pipeline_parallel_degree=2"}, 8, 2},
      {{"training.fsdp=hybrid_shard", "parallelism.pipeline_parallel_degree=2"}, 16, 8},
      {{"training.fsdp=hybrid_shard", "parallelism.data_parallel_replicate_degree=2"}, 8, 8},
      {{"training.fsdp=hybrid_shard", "parallelism.data_parallel_replicate_degree=2",
        "parallelism.tensor_parallel_degree=2"}, 16, 8},
      {{"training.fsdp=hybrid_shard_zero2", "parallelism.data_parallel_replicate_degree=4",
        "parallelism.data_parallel_shard_degree=2"}, 8, 8},
      {{"parallelism.pipeline_parallel_degree=2", "parallelism.tensor_parallel_degree=2"}, 8, 8},
  };
  for (const auto& k : cases) {
    const auto cfg = parse(base, k.keys);
    const auto dims = fsdpp::train::parallel_dims(cfg, k.world, k.node);
    const std::string what = fmt::format("{} on {} ranks, {} a node", fmt::join(k.keys, " "), k.world, k.node);
    EXPECT_EQ(fsdpp::estimate_parallel_dims(cfg.estimate_options(dims)).describe(), dims.describe()) << what;
    EXPECT_EQ(fsdpp::estimate_parallel_dims(cfg.estimate_options(dims)).dp_replicate, dims.dp_replicate) << what;
    auto keys = cfg.estimate_options();
    keys.world_size = k.world;
    keys.ranks_per_node = k.node;
    keys.pipeline.degree = static_cast<int>(cfg.parallelism.pipeline_parallel_degree);
    const auto played = fsdpp::estimate_parallel_dims(keys);
    EXPECT_EQ(played.describe(), dims.describe()) << what;
    EXPECT_EQ(played.dp_replicate, dims.dp_replicate) << what;
    EXPECT_EQ(played.dp_shard, dims.dp_shard) << what;
  }
  // The one default: a node's data-parallel ranks (its ranks over tp), at most those sharded.
  EXPECT_EQ(fsdpp::parallel::default_shard_group(16, 8), 8);
  EXPECT_EQ(fsdpp::parallel::default_shard_group(4, 8), 4);
  EXPECT_EQ(fsdpp::parallel::default_shard_group(16, 8, 2), 4);
  EXPECT_EQ(fsdpp::parallel::default_shard_group(16, 4, 8), 1);  // tp wider than a node: never 0
  EXPECT_EQ(fsdpp::parallel::default_shard_group(64, 0), fsdpp::parallel::kDefaultRanksPerNode);
}

// A replicate degree that does not split the data-parallel ranks: fsdpp-train refuses it, and so
// do fsdpp-estimate and fsdpp-plan's estimates from the same keys (estimate_shard_group; they
// used to play the default shard group instead), naming the key, its value and the data-parallel
// ranks. A degree that divides them plays dp / replicate ranks a shard group, as fsdpp-train.
TEST(Config, ReplicateDegreeThatDoesNotDivideIsRefusedByTheEstimate) {
  const std::string base = "data: {path: x}\n";
  const auto keys_of = [&](const std::vector<std::string>& keys, int world) {
    const auto cfg = parse(base, keys);
    auto o = cfg.estimate_options();
    o.world_size = world;
    o.ranks_per_node = 8;
    o.pipeline.degree = static_cast<int>(cfg.parallelism.pipeline_parallel_degree);
    return o;
  };
  const auto estimate_error = [&](const std::vector<std::string>& keys, int world) {
    const auto o = keys_of(keys, world);
    const std::string shard_group = error_of([&] { (void)fsdpp::estimate_shard_group(o); });
    EXPECT_EQ(error_of([&] { (void)fsdpp::estimate_parallel_dims(o); }), shard_group);
    return shard_group;
  };
  const std::string hsdp = "training.fsdp=hybrid_shard";
  EXPECT_EQ(estimate_error({hsdp, "parallelism.data_parallel_replicate_degree=3"}, 8),
            "[estimate] parallelism.data_parallel_replicate_degree=3 cannot fill 8 data-parallel ranks (the world "
            "size): HSDP's replicas are equal shard groups, so the replicate degree must divide the data-parallel "
            "ranks; expected a degree that divides 8 (1: no replicas)");
  expect_message(error_of([&] {
                   fsdpp::train::parallel_dims(parse(base, {hsdp, "parallelism.data_parallel_replicate_degree=3"}), 8,
                                               8);
                 }),
                 {"data_parallel_replicate_degree=3", "cannot fill 8 ranks"});
  // The data-parallel ranks are the world over tp (and a stage's under a pipeline).
  EXPECT_NE(estimate_error({hsdp, "parallelism.data_parallel_replicate_degree=3",
                            "parallelism.tensor_parallel_degree=2"}, 16)
                .find("replicate_degree=3 cannot fill 8 data-parallel ranks (world size 16 / tensor_parallel_degree "
                      "2)"),
            std::string::npos);
  EXPECT_NE(estimate_error({"training.fsdp=hybrid_shard_zero2", "parallelism.data_parallel_replicate_degree=3",
                            "parallelism.pipeline_parallel_degree=2"}, 8)
                .find("replicate_degree=3 cannot fill 4 data-parallel ranks per stage (world size 8 / "
                      "pipeline_parallel_degree 2)"),
            std::string::npos);
  // With a shard degree: refused unless it divides too, and unless their product is the ranks.
  EXPECT_NE(estimate_error({hsdp, "parallelism.data_parallel_replicate_degree=3",
                            "parallelism.data_parallel_shard_degree=2"}, 8)
                .find("replicate_degree=3 cannot fill 8 data-parallel ranks"),
            std::string::npos);
  EXPECT_EQ(estimate_error({hsdp, "parallelism.data_parallel_replicate_degree=2",
                            "parallelism.data_parallel_shard_degree=2"}, 8),
            "[estimate] parallelism.data_parallel_replicate_degree=2 x data_parallel_shard_degree=2 is 4 data-parallel "
            "ranks but there are 8 data-parallel ranks (the world size); expected their product to be the "
            "data-parallel ranks (data_parallel_shard_degree: -1 takes the ranks left over)");
  expect_message(error_of([&] {
                   fsdpp::train::parallel_dims(parse(base, {hsdp, "parallelism.data_parallel_replicate_degree=2",
                                                            "parallelism.data_parallel_shard_degree=2"}),
                                               8, 8);
                 }),
                 {"data_parallel_shard_degree=2", "is 4 ranks but the world has 8"});
  // Replicas without a hybrid strategy: refused by both.
  EXPECT_EQ(error_of([&] {
              (void)fsdpp::estimate_parallel_dims(keys_of({"parallelism.data_parallel_replicate_degree=2"}, 8));
            }),
            "[estimate] parallelism.data_parallel_replicate_degree=2 needs training.fsdp hybrid_shard or "
            "hybrid_shard_zero2 (replicas of shard groups); got FULL_SHARD");
  expect_message(error_of([&] {
                   fsdpp::train::parallel_dims(parse(base, {"parallelism.data_parallel_replicate_degree=2"}), 8, 8);
                 }),
                 {"data_parallel_replicate_degree=2 needs training.fsdp hybrid_shard"});
  // Degrees that divide: the estimate plays what fsdpp-train runs.
  for (const auto& [keys, world] : std::vector<std::pair<std::vector<std::string>, int>>{
           {{hsdp, "parallelism.data_parallel_replicate_degree=2"}, 8},
           {{hsdp, "parallelism.data_parallel_replicate_degree=4"}, 8},
           {{hsdp, "parallelism.data_parallel_replicate_degree=8"}, 8},
           {{hsdp, "parallelism.data_parallel_replicate_degree=3"}, 12},
           {{hsdp, "parallelism.data_parallel_replicate_degree=2", "parallelism.tensor_parallel_degree=2"}, 16},
           {{hsdp, "parallelism.data_parallel_replicate_degree=2", "parallelism.pipeline_parallel_degree=2"}, 8},
           {{hsdp, "parallelism.data_parallel_replicate_degree=2", "parallelism.data_parallel_shard_degree=4"}, 8}}) {
    const std::string what = fmt::format("{} on {} ranks", fmt::join(keys, " "), world);
    const auto o = keys_of(keys, world);
    const auto dims = fsdpp::train::parallel_dims(parse(base, keys), world, 8);
    fsdpp::parallel::ParallelDims played;
    ASSERT_NO_THROW(played = fsdpp::estimate_parallel_dims(o)) << what;
    EXPECT_EQ(played.dp_replicate, o.replicas) << what;
    EXPECT_EQ(played.dp_replicate, dims.dp_replicate) << what;
    EXPECT_EQ(played.dp_shard, dims.dp_shard) << what;
    EXPECT_EQ(fsdpp::estimate_shard_group(o), dims.dp_shard) << what;
  }
}

// parallelism: resolved on a world size (train/parallel_dims.h); every bad combination names
// its keys. The trainer's runs under these degrees: train.tensor_parallel.
TEST(Config, ParallelismDegrees) {
  using fsdpp::train::parallel_dims;
  const std::string base = "data: {path: x}\n";
  auto dims = parallel_dims(parse(base, {"parallelism.tensor_parallel_degree=2"}), 4);
  EXPECT_EQ(dims.dp_shard, 2);
  EXPECT_EQ(dims.tp, 2);
  EXPECT_EQ(dims.dp(), 2);
  EXPECT_EQ(dims.dp_rank(3), 1);  // tp innermost: ranks 2 and 3 are one tp group
  EXPECT_EQ(parallel_dims(parse(base), 3).dp_shard, 3);
  dims = parallel_dims(parse(base, {"training.fsdp=hybrid_shard", "parallelism.tensor_parallel_degree=2",
                                    "parallelism.data_parallel_replicate_degree=2"}),
                       8);
  EXPECT_EQ(fsdpp::train::layout_line(dims, false), "pp 1 x dp_replicate 2 x dp_shard 2 x tp 2 x ep 1");
  // A HYBRID strategy without a replicate degree: shard groups of a node's ranks (the local
  // world size), or fsdp_hybrid_shard_group_size; under a pipeline, at most a stage's dp ranks.
  dims = parallel_dims(parse(base, {"training.fsdp=hybrid_shard"}), 8, 4);
  EXPECT_EQ(fsdpp::train::layout_line(dims, false), "pp 1 x dp_replicate 2 x dp_shard 4 x tp 1 x ep 1");
  dims = parallel_dims(parse(base, {"training.fsdp=hybrid_shard",
                                    "training.fsdp_config.fsdp_hybrid_shard_group_size=2"}),
                       8, 4);
  EXPECT_EQ(fsdpp::train::layout_line(dims, false), "pp 1 x dp_replicate 4 x dp_shard 2 x tp 1 x ep 1");
  dims = parallel_dims(parse(base, {"training.fsdp=hybrid_shard", "parallelism.pipeline_parallel_degree=2"}), 4, 4);
  EXPECT_EQ(fsdpp::train::layout_line(dims, false), "pp 2 x dp_replicate 1 x dp_shard 2 x tp 1 x ep 1");
  dims = parallel_dims(parse(base, {"training.fsdp=hybrid_shard", "parallelism.pipeline_parallel_degree=2"}), 8, 2);
  EXPECT_EQ(fsdpp::train::layout_line(dims, false), "pp 2 x dp_replicate 2 x dp_shard 2 x tp 1 x ep 1");
  expect_message(error_of([&] { parallel_dims(parse(base, {"training.fsdp=hybrid_shard"}), 6, 4); }),
                 {"shards over groups of 4 ranks (LOCAL_WORLD_SIZE), which must divide the world size 6"});
  EXPECT_EQ(parse(base, {"parallelism.tensor_parallel_degree=2", "parallelism.enable_sequence_parallel=true"})
                .to_yaml()
                .find("enable_sequence_parallel: true") != std::string::npos,
            true);
  expect_message(error_of([&] { parallel_dims(parse(base, {"parallelism.tensor_parallel_degree=4"}), 6); }),
                 {"tensor_parallel_degree=4", "cannot fill 6 ranks"});
  expect_message(error_of([&] {
                   parallel_dims(parse(base, {"parallelism.tensor_parallel_degree=2",
                                              "parallelism.data_parallel_shard_degree=3"}),
                                 4);
                 }),
                 {"data_parallel_shard_degree=3", "is 6 ranks but the world has 4"});
  expect_message(error_of([&] {
                   parallel_dims(parse(base, {"parallelism.data_parallel_replicate_degree=2"}), 4);
                 }),
                 {"data_parallel_replicate_degree=2 needs training.fsdp hybrid_shard"});
  expect_message(error_of([&] {
                   parallel_dims(parse(base, {"training.fsdp=hybrid_shard", "parallelism.tensor_parallel_degree=2"}), 4);
                 }),
                 {"training.fsdp=HYBRID_SHARD with parallelism.tensor_parallel_degree=2 needs"});
  expect_message(yaml_error(base, {"parallelism.enable_sequence_parallel=true"}),
                 {"enable_sequence_parallel=true needs parallelism.tensor_parallel_degree > 1"});
  expect_message(yaml_error(base, {"parallelism.tensor_parallel_degree=0"}),
                 {"parallelism.tensor_parallel_degree=0: expected >= 1"});
  // fp16 composes with tensor parallelism (its scaler agrees over every mesh dim).
  EXPECT_NO_THROW(parse(base, {"parallelism.tensor_parallel_degree=2", "training.fp16=true"}));
  expect_message(yaml_error(base, {"parallelism.tensor_parallel_degre=2"}), {"tensor_parallel_degree"});
}

// What used to surface late (the memory check's [estimate] errors, the model build, the first
// forward) or with a truncated number is a [config] error of the config itself, naming the keys
// (docs/faults.md, issue 29).
TEST(Config, LayoutErrorsNameTheKeysBeforeAnythingRuns) {
  expect_message(yaml_error(kMinimal, {"model.n_kv_heads=1", "parallelism.tensor_parallel_degree=2"}),
                 {"model.n_heads=", "model.n_kv_heads=1 with parallelism.tensor_parallel_degree=2: "
                  "Llama: n_kv_heads=1 is smaller than the tensor-parallel degree 2"});
  expect_message(yaml_error(kMinimal, {"model.n_heads=6", "model.n_kv_heads=6", "model.dim=96",
                                       "parallelism.tensor_parallel_degree=4"}),
                 {"model.n_heads=6, model.n_kv_heads=6 with parallelism.tensor_parallel_degree=4: "
                  "Llama: n_heads=6 is not divisible by the tensor-parallel degree 4"});
  expect_message(yaml_error(kMinimal, {"data.seq_len=127", "parallelism.tensor_parallel_degree=2",
                                       "parallelism.enable_sequence_parallel=true"}),
                 {"data.seq_len=127 with parallelism.enable_sequence_parallel=true and "
                  "tensor_parallel_degree=2", "divisible by 2 (such as 126)"});
  expect_message(yaml_error(kMinimal, {"model.architecture=qwen3_moe", "model.num_experts=3",
                                       "model.num_experts_per_tok=1",
                                       "parallelism.expert_parallel_degree=2"}),
                 {"model.num_experts=3 with parallelism.expert_parallel_degree=2: "
                  "Qwen3MoeConfig.num_experts=3 is not divisible by the expert-parallel degree 2"});
  expect_message(yaml_error(kMinimal, {"parallelism.pipeline_parallel_degree=99999999999"}),
                 {"parallelism.pipeline_parallel_degree=99999999999: expected a number of ranks, "
                  "at most 1048576"});
  expect_message(yaml_error(kMinimal, {"parallelism.tensor_parallel_degree=4294967298"}),
                 {"parallelism.tensor_parallel_degree=4294967298"});
  // A world it cannot fill names the degree as given, not narrowed to an int.
  expect_message(error_of([&] {
                   parallel_dims(parse(kMinimal, {"parallelism.pipeline_parallel_degree=3"}), 2);
                 }),
                 {"parallelism.pipeline_parallel_degree=3 x", "cannot fill 2 ranks"});
  // Layouts that fit are accepted.
  EXPECT_NO_THROW(parse(kMinimal, {"parallelism.tensor_parallel_degree=2",
                                   "parallelism.enable_sequence_parallel=true"}));
  EXPECT_NO_THROW(parse(kMinimal, {"model.architecture=qwen3_moe", "model.num_experts=4",
                                   "model.num_experts_per_tok=2",
                                   "parallelism.expert_parallel_degree=2"}));
  // profile_steps: the item that is wrong, and steps the run never reaches.
  expect_message(yaml_error(kMinimal, {"training.profile_steps=[3-1]"}),
                 {"training.profile_steps has '3-1' (override 'training.profile_steps=[3-1]')",
                  "a range runs upwards, such as 1-3"});
  expect_message(yaml_error(kMinimal, {"training.profile_steps=[2,500]"}),
                 {"training.profile_steps has 500, beyond training.max_steps=10: that step never "
                  "runs"});
}

// distillation: keys set without distillation.teacher do nothing: the config names them.
TEST(Config, DistillationKeysWithoutATeacherAreUnused) {
  EXPECT_TRUE(parse(kMinimal).unused_keys().empty());
  const auto unused =
      parse(kMinimal, {"distillation.kd_ratio=0.9", "distillation.top_k=5"}).unused_keys();
  EXPECT_EQ(unused, (std::vector<std::string>{"distillation.kd_ratio=0.9", "distillation.top_k=5"}));
  EXPECT_TRUE(parse(kMinimal, {"distillation.teacher=somewhere", "distillation.kd_ratio=0.9"})
                  .unused_keys()
                  .empty());
}
