// Parquet and Arrow IPC files written here with Arrow's C++ writers, read back as records and
// examples: Arrow values as JSON, row groups and batches in order, only the columns an example
// needs, and the refusals (a missing column with the schema's columns, a type JSON cannot hold,
// invalid UTF-8 with its row and byte, a file that is not what its extension says).
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/writer.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>

#include <optional>
#include <string>
#include <vector>

#include "data_files_fixture.h"
#include "fsdpp/data/data_files.h"
#include "fsdpp/data/example.h"
#include "fsdpp/data/record_reader.h"

using namespace fsdpp::data;
using fsdpp_test::config_error;
using fsdpp_test::expect_message;
using json = nlohmann::ordered_json;

namespace {

class ArrowFiles : public fsdpp_test::DataFilesTest {};

template <typename T>
T ok(arrow::Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).ValueOrDie();
}
void ok(const arrow::Status& st) { ASSERT_TRUE(st.ok()) << st.ToString(); }

template <typename Builder>
std::shared_ptr<arrow::Array> strings(const std::vector<std::optional<std::string>>& values) {
  Builder b;
  for (const auto& v : values) ok(v ? b.Append(*v) : b.AppendNull());
  return ok(b.Finish());
}

std::shared_ptr<arrow::Array> int64s(const std::vector<int64_t>& values) {
  arrow::Int64Builder b;
  ok(b.AppendValues(values));
  return ok(b.Finish());
}

// list<struct<role: string, content: string>>: the messages column datasets writes for chats.
std::shared_ptr<arrow::Array> messages(const std::vector<std::vector<std::pair<std::string, std::string>>>& rows) {
  auto type = arrow::struct_({arrow::field("role", arrow::utf8()), arrow::field("content", arrow::utf8())});
  auto role = std::make_shared<arrow::StringBuilder>();
  auto content = std::make_shared<arrow::StringBuilder>();
  auto item = std::make_shared<arrow::StructBuilder>(type, arrow::default_memory_pool(),
                                                     std::vector<std::shared_ptr<arrow::ArrayBuilder>>{role, content});
  arrow::ListBuilder list(arrow::default_memory_pool(), item);
  for (const auto& row : rows) {
    ok(list.Append());
    for (const auto& [r, c] : row) {
      ok(item->Append());
      ok(role->Append(r));
      ok(content->Append(c));
    }
  }
  return ok(list.Finish());
}

std::shared_ptr<arrow::Table> table(const std::vector<std::pair<std::string, std::shared_ptr<arrow::Array>>>& cols) {
  arrow::FieldVector fields;
  arrow::ArrayVector arrays;
  for (const auto& [name, array] : cols) {
    fields.push_back(arrow::field(name, array->type()));
    arrays.push_back(array);
  }
  return arrow::Table::Make(arrow::schema(fields), arrays);
}

void write_parquet(const std::string& path, const arrow::Table& t, int64_t row_group_rows) {
  auto out = ok(arrow::io::FileOutputStream::Open(path));
  ok(parquet::arrow::WriteTable(t, arrow::default_memory_pool(), out, row_group_rows));
  ok(out->Close());
}

// An IPC stream (save_to_disk's format) or file, `batch_rows` rows per record batch.
void write_ipc(const std::string& path, const arrow::Table& t, int64_t batch_rows, bool file_format) {
  auto out = ok(arrow::io::FileOutputStream::Open(path));
  auto writer = file_format ? ok(arrow::ipc::MakeFileWriter(out, t.schema()))
                            : ok(arrow::ipc::MakeStreamWriter(out, t.schema()));
  ok(writer->WriteTable(t, batch_rows));
  ok(writer->Close());
  ok(out->Close());
}

std::vector<Record> all_records(const std::string& path, const RecordReadOptions& options = {}) {
  RecordStream stream(resolve_data_path(path), options);
  std::vector<Record> out;
  Record r;
  while (stream.next(r)) out.push_back(r);
  return out;
}

std::shared_ptr<arrow::Table> mixed_table() {
  arrow::HalfFloatBuilder half;
  ok(half.Append(0x3C00));  // 1.0
  ok(half.AppendNull());
  ok(half.Append(0xC000));  // -2.0
  arrow::StringDictionaryBuilder dict;
  ok(dict.Append("red"));
  ok(dict.Append("blue"));
  ok(dict.Append("red"));
  arrow::ListBuilder tags(arrow::default_memory_pool(), std::make_shared<arrow::StringBuilder>());
  auto* tag = static_cast<arrow::StringBuilder*>(tags.value_builder());
  ok(tags.Append());
  ok(tag->Append("a"));
  ok(tag->Append("b"));
  ok(tags.AppendNull());
  ok(tags.Append());  // []
  arrow::BooleanBuilder flag;
  ok(flag.AppendValues(std::vector<bool>{true, false, true}));
  arrow::DoubleBuilder score;
  ok(score.AppendValues({0.5, -1e300, 3.25}));
  return table({{"text", strings<arrow::LargeStringBuilder>({"één", std::nullopt, "漢字"})},
                {"id", int64s({1, -2, 3})},
                {"score", ok(score.Finish())},
                {"flag", ok(flag.Finish())},
                {"half", ok(half.Finish())},
                {"color", ok(dict.Finish())},
                {"tags", ok(tags.Finish())},
                {"messages", messages({{{"user", "hi"}, {"assistant", "hello"}}, {}, {{"user", "?"}}})}});
}

const json kMixedRows = json::parse(R"([
  {"text": "één", "id": 1, "score": 0.5, "flag": true, "half": 1.0, "color": "red", "tags": ["a", "b"],
   "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
  {"text": null, "id": -2, "score": -1e300, "flag": false, "half": null, "color": "blue", "tags": null,
   "messages": []},
  {"text": "漢字", "id": 3, "score": 3.25, "flag": true, "half": -2.0, "color": "red", "tags": [],
   "messages": [{"role": "user", "content": "?"}]}])");

TEST_F(ArrowFiles, ParquetRowGroupsAndArrowBatchesReadInOrderAsJson) {
  const auto t = mixed_table();
  const auto parquet = (dir_ / "t.parquet").string();
  write_parquet(parquet, *t, 1);  // three row groups
  const auto stream = (dir_ / "stream.arrow").string();
  write_ipc(stream, *t, 2, false);  // two batches
  const auto file = (dir_ / "file.arrow").string();
  write_ipc(file, *t, 2, true);
  for (const auto& path : {parquet, stream, file}) {
    const auto records = all_records(path);
    ASSERT_EQ(records.size(), 3u) << path;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(records[i].value, kMixedRows[i]) << path << " row " << i << ": " << records[i].value.dump();
      EXPECT_EQ(records[i].origin.row, static_cast<int64_t>(i));
      EXPECT_EQ(records[i].origin.line, 0);
    }
    EXPECT_EQ(records[2].origin.str(), path + " row 2");
    EXPECT_EQ(*schema_columns(data_file(path)),
              (std::vector<std::string>{"text", "id", "score", "flag", "half", "color", "tags", "messages"}));
  }
}

TEST_F(ArrowFiles, OnlyTheColumnsAskedForAndTheExampleNeeds) {
  arrow::BinaryBuilder image;
  ok(image.Append(std::string("\x89PNG\0\x01", 6)));
  ok(image.Append(std::string("\xFF\xD8", 2)));
  const auto t = table({{"text", strings<arrow::StringBuilder>({"a", ""})}, {"image", ok(image.Finish())}});
  const auto path = (dir_ / "img.parquet").string();
  write_parquet(path, *t, 10);
  // Every column: the binary one has no JSON form, and says so.
  expect_message(config_error([&] { all_records(path); }), {"img.parquet", "column 'image'", "binary"});
  EXPECT_EQ(all_records(path, {.columns = {"text"}})[1].value, json({{"text", ""}}));
  // The example reads "text" alone; the empty one is skipped.
  ExampleReader reader(resolve_data_path(path));
  Example ex;
  ASSERT_TRUE(reader.next(ex));
  EXPECT_EQ(ex.text, "a");
  EXPECT_FALSE(reader.next(ex));
  EXPECT_EQ(reader.skipped(), 1);
  expect_message(config_error([&] { all_records(path, {.columns = {"txt"}}); }),
                 {"img.parquet has no column 'txt'", "its columns: text, image"});
}

TEST_F(ArrowFiles, ASchemaWithoutTheColumnNamesItAndListsTheColumns) {
  const auto t = table({{"title", strings<arrow::StringBuilder>({"a"})}, {"body", strings<arrow::StringBuilder>({"b"})}});
  const auto path = (dir_ / "nt.parquet").string();
  write_parquet(path, *t, 10);
  expect_message(config_error([&] { ExampleReader r(resolve_data_path(path)); Example ex; r.next(ex); }),
                 {"nt.parquet", "no field 'text'", "data.dataset_text_field", "title, body"});
  // Shards whose schemas differ: the first decides (messages), the second lacks the column.
  std::filesystem::create_directories(dir_ / "shards");
  write_parquet((dir_ / "shards/a.parquet").string(), *table({{"messages", messages({{{"user", "x"}}})}}), 10);
  write_parquet((dir_ / "shards/b.parquet").string(), *t, 10);
  expect_message(config_error([&] {
                   ExampleReader r(resolve_data_path((dir_ / "shards").string()));
                   Example ex;
                   while (r.next(ex)) {
                   }
                 }),
                 {"b.parquet has no column 'messages'", "messages", "a.parquet", "its columns: title, body"});
}

TEST_F(ArrowFiles, InvalidUtf8InAStringColumnNamesTheRowTheColumnAndTheByte) {
  const auto t = table({{"text", strings<arrow::StringBuilder>({"fine", "ab\xC3\x28", "x"})}});
  const auto path = (dir_ / "bad.arrow").string();
  write_ipc(path, *t, 10, false);
  expect_message(config_error([&] { all_records(path); }),
                 {"bad.arrow row 1", "invalid UTF-8", "byte 2", "column 'text'"});
  const auto nested = table({{"messages", messages({{{"user", "ok"}, {"assistant", "\xFF"}}})}});
  const auto npath = (dir_ / "nested.arrow").string();
  write_ipc(npath, *nested, 10, false);
  expect_message(config_error([&] { all_records(npath); }), {"row 0", "column 'messages[].content'", "byte 0"});
}

TEST_F(ArrowFiles, AFileThatIsNotWhatItsExtensionSaysIsNamed) {
  const auto fake_parquet = write("fake.parquet", "{\"text\": \"I am JSON\"}\n");
  expect_message(config_error([&] { all_records(fake_parquet); }), {"fake.parquet", "not a Parquet file"});
  const auto fake_arrow = write("fake.arrow", "{\"text\": \"I am JSON\"}\n");
  expect_message(config_error([&] { all_records(fake_arrow); }), {"fake.arrow", "Arrow", "extension"});
  const auto empty_parquet = write("empty.parquet", "");
  expect_message(config_error([&] { all_records(empty_parquet); }), {"empty.parquet", "not a Parquet file"});
}

TEST_F(ArrowFiles, NoRowsIsAnEmptyDataset) {
  const auto t = table({{"text", strings<arrow::StringBuilder>({})}});
  const auto path = (dir_ / "none.parquet").string();
  write_parquet(path, *t, 10);
  expect_message(config_error([&] { all_records(path); }), {"none.parquet", "no records"});
}

}  // namespace
