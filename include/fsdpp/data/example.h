#pragma once
// Training examples from records, as TRL's SFTTrainer reads a dataset:
//
//   kind                              record fields
//   PROMPT_COMPLETION                 "prompt": "...", "completion": "..."
//   CONVERSATIONAL_PROMPT_COMPLETION  "prompt": [messages], "completion": [messages]
//   MESSAGES                          "messages": [{"role": "user", "content": "..."}, ...]
//   TEXT                              "<data.dataset_text_field>": "..."  (default "text")
//
// looked for in that order (TRL's tokenize step tests "prompt" first, then conversational
// "messages", then the text field). The kind is decided once per data.path: from the first
// record of a JSON file, or from the first file's schema for Parquet and Arrow (whose other columns
// are then not even decoded); every later record must have the fields of that kind, as a dataset's
// columns are the same in every row. Other fields (ids, metadata) are ignored.
//
//   fsdpp::data::ExampleReader examples(fsdpp::data::resolve_data_path("chat.jsonl"));
//   fsdpp::data::Example ex;
//   while (examples.next(ex)) tokenize(ex);
//   log("{} examples, {} skipped (empty)", examples.examples(), examples.skipped());
//
// A message is an object with a string "role" and a string "content" (null content is accepted
// beside "tool_calls", as in tool-calling chats); its other keys are kept. An example with nothing
// to learn is skipped and counted, not an error: an empty text, an empty completion (a string "" or
// no messages), or no messages. Errors (ConfigError, "[data]"): a missing field names it, the
// kind, and lists the record's fields (or the schema's columns); a field of the wrong type names
// the field, what it is and what is accepted, with the file and the line or row.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fsdpp/data/data_files.h"
#include "fsdpp/data/record.h"
#include "fsdpp/data/record_reader.h"

namespace fsdpp::data {

enum class ExampleKind { TEXT, PROMPT_COMPLETION, CONVERSATIONAL_PROMPT_COMPLETION, MESSAGES };

// "text", "prompt_completion", "conversational_prompt_completion", "messages".
std::string_view example_kind_name(ExampleKind kind);

struct ExampleOptions {
  std::string text_field = "text";  // data.dataset_text_field (TRL's key)
};

struct Example {
  ExampleKind kind = ExampleKind::TEXT;
  std::string text;        // TEXT
  std::string prompt;      // PROMPT_COMPLETION
  std::string completion;  // PROMPT_COMPLETION
  // MESSAGES: the conversation; CONVERSATIONAL_PROMPT_COMPLETION: the prompt's messages. An array
  // of message objects.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json completion_messages;  // CONVERSATIONAL_PROMPT_COMPLETION
  RecordOrigin origin;

  // The example with TRL's field names: {"text": ...}, {"prompt": ..., "completion": ...} or
  // {"messages": [...]}.
  nlohmann::ordered_json to_json() const;
};

// The kind a record's fields (JSON) or a schema's columns (Parquet, Arrow) make. Throws
// ConfigError naming `where` and listing `fields` when none fits.
ExampleKind example_kind(const std::vector<std::string>& fields, const ExampleOptions& options,
                         const std::string& where);

// The columns an example of `kind` reads.
std::vector<std::string> example_columns(ExampleKind kind, const ExampleOptions& options);

// `record` as an example of `kind`, its strings moved out; nullopt when it has nothing to learn
// (skipped). Throws ConfigError for a missing field or one of the wrong type.
std::optional<Example> to_example(Record&& record, ExampleKind kind, const ExampleOptions& options);

// The examples of a resolved data.path, file after file, each Parquet or Arrow file read for its
// example's columns only.
class ExampleReader {
 public:
  // Throws ConfigError when `files` is text (the caller's route).
  explicit ExampleReader(DataFiles files, ExampleOptions options = {});
  // The next example; false after the last. Throws ConfigError naming data.path when its files
  // hold no record, or no record that is not skipped.
  bool next(Example& example);

  const DataFiles& files() const { return files_; }
  std::optional<ExampleKind> kind() const { return kind_; }
  int64_t files_opened() const { return static_cast<int64_t>(next_file_); }
  int64_t records() const { return records_; }
  int64_t examples() const { return records_ - skipped_; }
  int64_t skipped() const { return skipped_; }  // records with nothing to learn

 private:
  void open_next_file();

  DataFiles files_;
  ExampleOptions options_;
  std::optional<ExampleKind> kind_;
  std::string kind_from_;  // the file that decided kind_, for messages
  std::unique_ptr<RecordReader> reader_;
  size_t next_file_ = 0;
  int64_t records_ = 0, skipped_ = 0;
};

}  // namespace fsdpp::data
