#include "fsdpp/data/example.h"

#include <algorithm>

#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

std::string field_list(const nlohmann::ordered_json& object) {
  std::string out;
  for (const auto& [key, _] : object.items()) out += (out.empty() ? "" : ", ") + key;
  return out.empty() ? "(none)" : out;
}

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

// "null", "a string", "an array": what a value is, in a message.
std::string a_type(const nlohmann::ordered_json& value) {
  if (value.is_null()) return "null";
  const std::string name = value.type_name();
  return (value.is_object() || value.is_array() ? "an " : "a ") + name;
}

bool has(const std::vector<std::string>& fields, std::string_view name) {
  return std::find(fields.begin(), fields.end(), name) != fields.end();
}

// The record's field `name`, which its example's kind needs.
nlohmann::ordered_json& field(Record& record, const std::string& name, ExampleKind kind) {
  auto it = record.value.find(name);
  if (it == record.value.end()) {
    FSDPP_THROW(ConfigError, "[data] {}: no field '{}', which every record of this data.path needs "
                "(its examples are {}, decided by its first record or schema); the record's "
                "fields: {}", record.origin.str(), name, example_kind_name(kind), field_list(record.value));
  }
  return *it;
}

std::string take_string(nlohmann::ordered_json& value, const Record& record, const std::string& name,
                        std::string_view accepted) {
  FSDPP_CHECK_AS(ConfigError, value.is_string(), "[data] {}: field '{}' is {}; expected {}",
                 record.origin.str(), name, a_type(value), accepted);
  return std::move(value.get_ref<std::string&>());
}

// A list of {"role", "content"} objects, as chat templates read them.
void check_messages(const nlohmann::ordered_json& messages, const Record& record, const std::string& name) {
  FSDPP_CHECK_AS(ConfigError, messages.is_array(), "[data] {}: field '{}' is {}; expected a list of "
                 "messages ({{\"role\": ..., \"content\": ...}})", record.origin.str(), name,
                 a_type(messages));
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    FSDPP_CHECK_AS(ConfigError, m.is_object(), "[data] {}: {}[{}] is {}; a message is an object "
                   "{{\"role\": ..., \"content\": ...}}", record.origin.str(), name, i, a_type(m));
    const auto role = m.find("role");
    FSDPP_CHECK_AS(ConfigError, role != m.end() && role->is_string(), "[data] {}: {}[{}] has no string "
                   "'role' (its keys: {}); a message is {{\"role\": ..., \"content\": ...}}",
                   record.origin.str(), name, i, field_list(m));
    const auto content = m.find("content");
    const bool tool_call = m.contains("tool_calls") && (content == m.end() || content->is_null());
    FSDPP_CHECK_AS(ConfigError, tool_call || (content != m.end() && content->is_string()),
                   "[data] {}: {}[{}].content is {}; expected a string (or null beside \"tool_calls\"); "
                   "content given as a list of parts (multimodal) is not read", record.origin.str(),
                   name, i, content == m.end() ? std::string("missing") : a_type(*content));
  }
}

}  // namespace

std::string_view example_kind_name(ExampleKind kind) {
  switch (kind) {
    case ExampleKind::TEXT: return "text";
    case ExampleKind::PROMPT_COMPLETION: return "prompt_completion";
    case ExampleKind::CONVERSATIONAL_PROMPT_COMPLETION: return "conversational_prompt_completion";
    case ExampleKind::MESSAGES: return "messages";
  }
  return "?";
}

nlohmann::ordered_json Example::to_json() const {
  switch (kind) {
    case ExampleKind::TEXT: return {{"text", text}};
    case ExampleKind::PROMPT_COMPLETION: return {{"prompt", prompt}, {"completion", completion}};
    case ExampleKind::CONVERSATIONAL_PROMPT_COMPLETION:
      return {{"prompt", messages}, {"completion", completion_messages}};
    case ExampleKind::MESSAGES: return {{"messages", messages}};
  }
  return nullptr;
}

ExampleKind example_kind(const std::vector<std::string>& fields, const ExampleOptions& options,
                         const std::string& where) {
  if (has(fields, "prompt")) {
    FSDPP_CHECK_AS(ConfigError, has(fields, "completion"), "[data] {}: a 'prompt' without a "
                   "'completion'; prompt/completion examples need both (fields: {})", where, list(fields));
    return ExampleKind::PROMPT_COMPLETION;
  }
  if (has(fields, "messages")) return ExampleKind::MESSAGES;
  FSDPP_CHECK_AS(ConfigError, has(fields, options.text_field),
                 "[data] {}: no field '{}' (data.dataset_text_field), nor 'messages', nor 'prompt' and "
                 "'completion'; its fields: {}. Name the text field with data.dataset_text_field",
                 where, options.text_field, list(fields));
  return ExampleKind::TEXT;
}

std::vector<std::string> example_columns(ExampleKind kind, const ExampleOptions& options) {
  switch (kind) {
    case ExampleKind::TEXT: return {options.text_field};
    case ExampleKind::PROMPT_COMPLETION:
    case ExampleKind::CONVERSATIONAL_PROMPT_COMPLETION: return {"prompt", "completion"};
    case ExampleKind::MESSAGES: return {"messages"};
  }
  return {};
}

std::optional<Example> to_example(Record&& record, ExampleKind kind, const ExampleOptions& options) {
  Example ex;
  ex.kind = kind;
  switch (kind) {
    case ExampleKind::TEXT:
      ex.text = take_string(field(record, options.text_field, kind), record, options.text_field,
                            "a string (data.dataset_text_field names the text field)");
      if (ex.text.empty()) return std::nullopt;
      break;
    case ExampleKind::PROMPT_COMPLETION:
    case ExampleKind::CONVERSATIONAL_PROMPT_COMPLETION: {
      // TRL's is_conversational, per record: a prompt that is a list of messages.
      auto& prompt = field(record, "prompt", kind);
      auto& completion = field(record, "completion", kind);
      if (prompt.is_array()) {
        ex.kind = ExampleKind::CONVERSATIONAL_PROMPT_COMPLETION;
        check_messages(prompt, record, "prompt");
        check_messages(completion, record, "completion");
        if (completion.empty()) return std::nullopt;
        ex.messages = std::move(prompt);
        ex.completion_messages = std::move(completion);
        break;
      }
      ex.kind = ExampleKind::PROMPT_COMPLETION;
      ex.prompt = take_string(prompt, record, "prompt", "a string, or a list of messages (conversational)");
      ex.completion = take_string(completion, record, "completion", "a string, as the prompt is one");
      if (ex.completion.empty()) return std::nullopt;
      break;
    }
    case ExampleKind::MESSAGES: {
      auto& messages = field(record, "messages", kind);
      check_messages(messages, record, "messages");
      if (messages.empty()) return std::nullopt;
      ex.messages = std::move(messages);
      break;
    }
  }
  ex.origin = std::move(record.origin);
  return ex;
}

ExampleReader::ExampleReader(DataFiles files, ExampleOptions options)
    : files_(std::move(files)), options_(std::move(options)) {
  FSDPP_CHECK_AS(ConfigError, !files_.files.empty() && !files_.is_text(),
                 "[data] data.path '{}' is plain text, which has no records; examples come from "
                 ".jsonl, .json, .parquet and .arrow files", files_.path);
}

void ExampleReader::open_next_file() {
  const DataFile& file = files_.files[next_file_++];
  RecordReadOptions read;
  if (const auto columns = schema_columns(file)) {
    if (!kind_) {
      kind_ = example_kind(*columns, options_, file.path.string());
      kind_from_ = file.path.string();
    }
    read.columns = example_columns(*kind_, options_);
    for (const auto& c : read.columns) {
      FSDPP_CHECK_AS(ConfigError, std::find(columns->begin(), columns->end(), c) != columns->end(),
                     "[data] {} has no column '{}', which the examples of data.path '{}' need (they "
                     "are {}, as {} decided); its columns: {}", file.path.string(), c, files_.path,
                     example_kind_name(*kind_), kind_from_, list(*columns));
    }
  }
  reader_ = open_records(file, read);
}

bool ExampleReader::next(Example& example) {
  Record record;
  for (;;) {
    if (reader_ && reader_->next(record)) {
      ++records_;
      if (!kind_) {
        std::vector<std::string> fields;
        for (const auto& [key, _] : record.value.items()) fields.push_back(key);
        kind_ = example_kind(fields, options_, record.origin.str());
        kind_from_ = record.origin.file;
      }
      if (auto ex = to_example(std::move(record), *kind_, options_)) {
        example = std::move(*ex);
        return true;
      }
      ++skipped_;
      continue;
    }
    if (next_file_ < files_.files.size()) {
      open_next_file();
      continue;
    }
    reader_.reset();
    FSDPP_CHECK_AS(ConfigError, records_ > 0, "[data] data.path '{}' holds no records ({} file{} read, "
                   "each empty); give data with at least one record", files_.path, files_.files.size(),
                   files_.files.size() == 1 ? "" : "s");
    FSDPP_CHECK_AS(ConfigError, examples() > 0, "[data] data.path '{}' holds no examples: all {} "
                   "records have nothing to learn (an empty text or completion, or no messages)",
                   files_.path, records_);
    return false;
  }
}

}  // namespace fsdpp::data
