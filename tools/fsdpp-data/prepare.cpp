// fsdpp-data prepare and fsdpp-data documents. See prepare.h.
#include "prepare.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/document_maker.h"
#include "fsdpp/data/prepare_records.h"
#include "fsdpp/data/tokenizer.h"

namespace fsdpp_data_tool {
namespace {

namespace data = fsdpp::data;
namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One progress line per shard; on a terminal, one line rewritten in place.
void progress_line(const std::string& line, bool tty) {
  std::fprintf(stderr, tty ? "\r%s\033[K" : "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace

data::MixtureSource parse_mix(const std::string& arg) {
  const size_t eq = arg.rfind('=');
  FSDPP_CHECK_AS(ConfigError, eq != std::string::npos && eq > 0,
                 "[data] --mix '{}' is not PATH=WEIGHT (e.g. --mix chat.jsonl=3)", arg);
  try {
    size_t used = 0;
    const double w = std::stod(arg.substr(eq + 1), &used);
    if (used == arg.size() - eq - 1) return {arg.substr(0, eq), w};
  } catch (const std::exception&) {
  }
  FSDPP_THROW(ConfigError, "[data] --mix '{}': the weight '{}' is not a number", arg, arg.substr(eq + 1));
}

int run_prepare(const PrepareArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const auto tok = data::make_tokenizer(args.tokenizer);
  data::RecordSources sources;
  sources.path = args.path;
  for (const auto& m : args.mix) sources.mixture.push_back(parse_mix(m));
  sources.seed = args.seed;
  sources.stopping = data::stopping_strategy_from_name(args.stopping);
  sources.examples.text_field = args.text_field;
  const data::DocumentMaker maker(*tok, {.completion_only_loss = args.completion_only_loss,
                                         .assistant_only_loss = args.assistant_only_loss});
  const auto spec = data::record_spec(sources, *tok, maker);
  uint64_t bytes = 0;
  for (const auto& s : spec.sources) bytes += s.bytes;
  const bool tty = isatty(STDERR_FILENO) != 0;
  data::PrepareOptions options;
  options.threads = args.threads;
  options.progress = [&](int64_t records, int64_t docs, int64_t tokens) {
    const double t = seconds_since(start);
    progress_line(fmt::format("[fsdpp-data] {}: {} records, {} documents, {} tokens, {:.1f} s "
                              "({:.0f} tokens/s)",
                              args.out, records, docs, tokens, t, static_cast<double>(tokens) / std::max(t, 1e-9)),
                  tty);
  };
  const auto m = data::prepare_records(sources, maker, spec, args.out, options);
  if (tty) std::fputc('\n', stderr);
  std::string skipped;
  for (const auto& [why, n] : m.skipped()) skipped += fmt::format("; {} skipped ({})", n, why);
  const double t = seconds_since(start);
  std::fprintf(stderr,
               "[fsdpp-data] prepared %s: %lld records of %.2f MB into %lld documents, %lld tokens "
               "(%lld counted by the loss: %s)%s; tokenizer %s; %zu shards; %.1f s, %.2f MB/s, %.0f "
               "tokens/s. Train on it with data.path=%s\n",
               args.out.c_str(), static_cast<long long>(m.records), static_cast<double>(bytes) / 1e6,
               static_cast<long long>(m.documents()), static_cast<long long>(m.tokens()),
               static_cast<long long>(m.loss_tokens()), maker.describe().c_str(), skipped.c_str(),
               tok->name().c_str(), m.shards.size(), t, static_cast<double>(bytes) / 1e6 / std::max(t, 1e-9),
               static_cast<double>(m.tokens()) / std::max(t, 1e-9), args.out.c_str());
  return 0;
}

void add_prepare(CLI::App& app, PrepareArgs& args) {
  auto* cmd = app.add_subcommand(
      "prepare", "Tokenize data files once into the documents fsdpp-train reads (data.path=OUT)");
  cmd->add_option("path", args.path, "The data files (as fsdpp-data records takes them)");
  cmd->add_option("--mix", args.mix, "PATH=WEIGHT: a source of a weighted mixture (repeat it)");
  cmd->add_option("--tokenizer", args.tokenizer,
                  "The model's tokenizer: a tokenizer.json, a Hugging Face model directory, an "
                  "fsdpp checkpoint, a .model file, or byte")
      ->required();
  cmd->add_option("--out", args.out, "The directory to write (resumed when it holds a part of the same)")
      ->required();
  cmd->add_option("--text-field", args.text_field, "The text field (data.dataset_text_field)");
  cmd->add_option("--completion-only-loss", args.completion_only_loss,
                  "Prompt/completion examples: loss on the completion only (true, the default) or on all");
  cmd->add_flag("--assistant-only-loss", args.assistant_only_loss,
                "Conversations: loss on the assistant turns only (data.assistant_only_loss)");
  cmd->add_option("--threads", args.threads, "Tokenizing threads (0: every core)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args.seed, "The mixture's seed (fsdpp-train: training.seed)");
  cmd->add_option("--stopping-strategy", args.stopping,
                  "The mixture's end: first_exhausted, all_exhausted, all_exhausted_without_replacement");
  cmd->callback([&args] {
    if (args.path.empty() == args.mix.empty()) {
      throw CLI::ValidationError("prepare", "give a PATH, or --mix PATH=WEIGHT sources, not both");
    }
  });
}

int run_documents(const DocumentsArgs& args) {
  const auto m = data::read_manifest(args.dir);
  FSDPP_CHECK_AS(ConfigError, m.has_value(),
                 "[data] '{}' holds no {}: expected a directory fsdpp-data prepare (or fsdpp-train's "
                 "cache) wrote",
                 args.dir, data::kPreparedManifest);
  const auto store = data::open_prepared(args.dir, *m);
  const auto tok = args.tokenizer.empty() ? nullptr : data::make_tokenizer(args.tokenizer);
  FSDPP_CHECK_AS(ConfigError, !tok || tok->name() == m->spec.tokenizer,
                 "[data] --tokenizer '{}' is {}, and '{}' was prepared with {}", args.tokenizer,
                 tok ? tok->name() : "", args.dir, m->spec.tokenizer);
  const int64_t end = args.skip + std::min(args.limit, store.num_documents() - std::min(args.skip, store.num_documents()));
  for (int64_t d = args.skip; d < end; ++d) {
    const int64_t n = store.length(d);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    std::vector<uint8_t> mask(static_cast<size_t>(n));
    store.read(d, 0, n, ids.data(), mask.data());
    nlohmann::ordered_json j;
    j["document"] = d;
    j["ids"] = ids;
    j["mask"] = mask;
    if (tok) j["text"] = tok->decode(std::vector<int32_t>(ids.begin(), ids.end()));
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  std::fprintf(stderr, "[fsdpp-data] %s: %lld documents, %lld tokens (%lld counted by the loss), "
               "tokenizer %s, options: %s\n", args.dir.c_str(), static_cast<long long>(store.num_documents()),
               static_cast<long long>(store.num_tokens()), static_cast<long long>(m->loss_tokens()),
               m->spec.tokenizer.c_str(), m->spec.options.c_str());
  return 0;
}

void add_documents(CLI::App& app, DocumentsArgs& args) {
  auto* cmd = app.add_subcommand("documents", "Print a prepared directory's documents: ids and loss mask");
  cmd->add_option("dir", args.dir, "A directory fsdpp-data prepare wrote")->required();
  cmd->add_option("--limit", args.limit, "Print at most N")->check(CLI::NonNegativeNumber);
  cmd->add_option("--skip", args.skip, "Start at document N")->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokenizer", args.tokenizer, "Also print each document decoded (the tokenizer it was prepared with)");
}

}  // namespace fsdpp_data_tool
