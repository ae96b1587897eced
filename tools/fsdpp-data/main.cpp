// fsdpp-data: the data files users bring, as fsdpp reads them (docs/your-data.md).
//   fsdpp-data records data/train-*.parquet --limit 5          the records, one JSON object a line
//   fsdpp-data records chat.jsonl.zst --examples               the training examples TRL would see
//   fsdpp-data records data/ --count                           only the summary
//   fsdpp-data records --mix chat.jsonl=3 --mix web/=1 --seed 7 --limit 100   a weighted mixture
//   fsdpp-data prepare chat.jsonl --tokenizer model-dir/ --out prepared/   tokenized once (prepare.h)
//   fsdpp-data documents prepared/ --limit 3                   its ids and loss masks
// stdout is JSON Lines; a summary (files, records, examples, skipped) goes to stderr. Each
// subcommand is one function below.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <ctime>
#include <exception>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/data/data_files.h"
#include "fsdpp/data/example.h"
#include "fsdpp/data/mixture_reader.h"
#include "fsdpp/data/record_reader.h"
#include "prepare.h"

namespace {

namespace data = fsdpp::data;
using fsdpp_data_tool::parse_mix;

struct RecordsArgs {
  std::string path;
  std::vector<std::string> mix;  // PATH=WEIGHT
  int64_t limit = std::numeric_limits<int64_t>::max();
  std::string text_field = "text";
  bool examples = false;
  bool count = false;  // read everything, print only the summary
  uint64_t seed = 0;
  std::string stopping = "first_exhausted";
};

// CPU seconds of this process: the summary says what reading cost, start-up (loading LibTorch)
// left out, and on a shared machine CPU time says it where wall time would not.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// "1 record", "2 records".
std::string count(int64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

void print(const nlohmann::ordered_json& value) {
  const std::string line = value.dump();
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
}

// "2 of 3 files" (or "1 file"), and whether save_to_disk wrote them.
std::string files_read(const data::DataFiles& files, int64_t opened) {
  const auto total = static_cast<int64_t>(files.files.size());
  return fmt::format("{}{} file{}{}", opened == total ? "" : fmt::format("{} of ", opened), total,
                     total == 1 ? "" : "s", files.saved_dataset ? " (a save_to_disk directory)" : "");
}

int run_mixture(const RecordsArgs& args) {
  std::vector<data::MixtureSource> sources;
  for (const auto& m : args.mix) sources.push_back(parse_mix(m));
  const double start = cpu_seconds();
  data::MixtureReader mix(sources, {.seed = args.seed,
                                    .stopping = data::stopping_strategy_from_name(args.stopping),
                                    .examples = {.text_field = args.text_field}});
  data::Example ex;
  size_t source = 0;
  int64_t n = 0;
  for (; n < args.limit && mix.next(ex, source); ++n) {
    if (args.count) continue;
    auto j = ex.to_json();
    j["source"] = source;
    print(j);
  }
  std::fflush(stdout);
  std::string per_source;
  for (size_t k = 0; k < mix.sources(); ++k) {
    const double share = n == 0 ? 0.0 : 100.0 * static_cast<double>(mix.examples(k)) / static_cast<double>(n);
    per_source += fmt::format("{}{}: {} ({:.1f}%; its weight {:.1f}%), ran out {}, {} skipped", k == 0 ? "" : "; ",
                              sources[k].path, count(mix.examples(k), "example"), share,
                              100.0 * mix.sampler().probabilities()[k], count(mix.passes(k), "time"),
                              mix.skipped(k));
  }
  std::fprintf(stderr, "[fsdpp-data] mixture of %zu sources, seed %llu, %s: %s in %.3f s of CPU; %s\n",
               mix.sources(), static_cast<unsigned long long>(args.seed), args.stopping.c_str(),
               count(n, "example").c_str(), cpu_seconds() - start, per_source.c_str());
  return 0;
}

int run_records(const RecordsArgs& args) {
  if (!args.mix.empty()) return run_mixture(args);
  const auto files = data::resolve_data_path(args.path);
  if (files.is_text()) {
    std::fprintf(stderr, "[fsdpp-data] '%s' is plain text: fsdpp-train reads it as a text corpus "
                 "(docs/own-text.md), not as records\n", args.path.c_str());
    return 1;
  }
  int64_t n = 0;
  const double start = cpu_seconds();
  if (args.examples) {
    data::ExampleReader examples(files, {.text_field = args.text_field});
    data::Example ex;
    for (; n < args.limit && examples.next(ex); ++n) {
      if (!args.count) print(ex.to_json());
    }
    std::fflush(stdout);
    const std::string kind = examples.kind() ? std::string(data::example_kind_name(*examples.kind())) : "?";
    std::fprintf(stderr, "[fsdpp-data] %s: %s (%s) from %s in %s; %lld skipped (nothing to learn); %.3f s "
                 "of CPU\n", args.path.c_str(), count(n, "example").c_str(), kind.c_str(),
                 count(examples.records(), "record").c_str(), files_read(files, examples.files_opened()).c_str(),
                 static_cast<long long>(examples.skipped()), cpu_seconds() - start);
    return 0;
  }
  data::RecordStream records(files);
  data::Record r;
  for (; n < args.limit && records.next(r); ++n) {
    if (!args.count) print(r.value);
  }
  std::fflush(stdout);
  std::fprintf(stderr, "[fsdpp-data] %s: %s in %s; %.3f s of CPU\n", args.path.c_str(),
               count(n, "record").c_str(), files_read(files, records.files_opened()).c_str(),
               cpu_seconds() - start);
  return 0;
}

void add_records(CLI::App& app, RecordsArgs& args) {
  auto* cmd = app.add_subcommand("records", "Print the records (or the examples) of data files as JSON Lines");
  cmd->add_option("path", args.path,
                  "A data file (.jsonl, .json, .gz/.zst of them, .parquet, .arrow), a directory of them "
                  "(or one save_to_disk wrote), or a glob");
  cmd->add_option("--mix", args.mix, "PATH=WEIGHT: a source of a weighted mixture (repeat it); prints examples");
  cmd->add_option("--limit", args.limit, "Print at most N")->check(CLI::NonNegativeNumber);
  cmd->add_option("--text-field", args.text_field, "The text field (data.dataset_text_field)");
  cmd->add_flag("--examples", args.examples, "Print the examples (text, prompt/completion, messages)");
  cmd->add_flag("--count", args.count, "Read them all but print only the summary");
  cmd->add_option("--seed", args.seed, "The mixture's seed");
  cmd->add_option("--stopping-strategy", args.stopping,
                  "The mixture's end: first_exhausted, all_exhausted, all_exhausted_without_replacement");
  cmd->callback([&args] {
    if (args.path.empty() == args.mix.empty()) {
      throw CLI::ValidationError("records", "give a PATH, or --mix PATH=WEIGHT sources, not both");
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdpp-data: the data files you bring, as fsdpp reads them (docs/your-data.md)"};
  app.require_subcommand(1);
  RecordsArgs records;
  add_records(app, records);
  fsdpp_data_tool::PrepareArgs prepare;
  fsdpp_data_tool::add_prepare(app, prepare);
  fsdpp_data_tool::DocumentsArgs documents;
  fsdpp_data_tool::add_documents(app, documents);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("records")) return run_records(records);
    if (app.got_subcommand("prepare")) return fsdpp_data_tool::run_prepare(prepare);
    if (app.got_subcommand("documents")) return fsdpp_data_tool::run_documents(documents);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 2;
}
