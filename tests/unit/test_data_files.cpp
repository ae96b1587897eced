// data.path resolved into files, JSON records and examples: what they read and how they refuse
// (include/fsdpp/data/data_files.h, record_reader.h, example.h). Parquet and Arrow files are in
// test_data_arrow.cpp; the records equal to what `datasets` reads in tests/unit/data_records.py.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

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

class DataPath : public fsdpp_test::DataFilesTest {};
class JsonRecords : public fsdpp_test::DataFilesTest {};
class Examples : public fsdpp_test::DataFilesTest {};

std::vector<Record> all_records(const std::string& path) {
  RecordStream stream(resolve_data_path(path));
  std::vector<Record> out;
  Record r;
  while (stream.next(r)) out.push_back(r);
  return out;
}

std::vector<Example> all_examples(const std::string& path, ExampleReader* counts = nullptr,
                                  const ExampleOptions& options = {}) {
  ExampleReader reader(resolve_data_path(path), options);
  std::vector<Example> out;
  Example ex;
  while (reader.next(ex)) out.push_back(ex);
  if (counts) *counts = std::move(reader);
  return out;
}

std::string gzip(const std::string& text) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
  return out;
}

// --- data.path ---------------------------------------------------------------------------------

TEST_F(DataPath, FormatAndCompressionFromTheName) {
  EXPECT_EQ(data_file("a/x.jsonl").format, FileFormat::JSON);
  EXPECT_EQ(data_file("x.JSON").format, FileFormat::JSON);
  const auto zst = data_file("x.jsonl.zst");
  EXPECT_EQ(zst.format, FileFormat::JSON);
  EXPECT_EQ(zst.compression, Compression::ZSTD);
  EXPECT_EQ(data_file("x.json.gz").compression, Compression::GZIP);
  EXPECT_EQ(data_file("x.parquet").format, FileFormat::PARQUET);
  EXPECT_EQ(data_file("data-00000-of-00002.arrow").format, FileFormat::ARROW);
  EXPECT_EQ(data_file("notes.txt").format, FileFormat::TEXT);
  EXPECT_EQ(data_file("README").format, FileFormat::TEXT);
  expect_message(config_error([] { data_file("x.parquet.gz"); }), {"x.parquet.gz", "gzip", "decompress"});
}

TEST_F(DataPath, AFileADirectoryOfShardsAndAGlobInNameOrder) {
  write("shards/b.jsonl", "{\"text\": \"b\"}\n");
  write("shards/a.jsonl", "{\"text\": \"a\"}\n");
  write("shards/c.jsonl.gz", gzip("{\"text\": \"c\"}\n"));
  write("shards/dataset_info.json", "{}");  // datasets' metadata, not data
  write("shards/.hidden.jsonl", "{\"text\": \"hidden\"}\n");
  write("shards/README.txt", "not data");
  const auto one = resolve_data_path((dir_ / "shards/a.jsonl").string());
  ASSERT_EQ(one.files.size(), 1u);
  EXPECT_FALSE(one.is_text());

  const auto dir = resolve_data_path((dir_ / "shards").string());
  ASSERT_EQ(dir.files.size(), 3u);
  EXPECT_EQ(dir.files[0].path.filename(), "a.jsonl");
  EXPECT_EQ(dir.files[1].path.filename(), "b.jsonl");
  EXPECT_EQ(dir.files[2].path.filename(), "c.jsonl.gz");
  std::string texts;
  for (const auto& r : all_records((dir_ / "shards").string())) texts += r.value["text"].get<std::string>();
  EXPECT_EQ(texts, "abc");

  const auto glob = resolve_data_path((dir_ / "shards/*.jsonl").string());
  ASSERT_EQ(glob.files.size(), 2u);
  EXPECT_EQ(glob.files[0].path.filename(), "a.jsonl");
  expect_message(config_error([&] { resolve_data_path((dir_ / "shards/*.parquet").string()); }),
                 {"shards/*.parquet", "matches no file"});
  expect_message(config_error([&] { resolve_data_path((dir_ / "shards/*").string()); }),
                 {"text files", "data files", "README.txt"});
  expect_message(config_error([&] { resolve_data_path((dir_ / "nope.jsonl").string()); }),
                 {"nope.jsonl", "does not exist"});
}

TEST_F(DataPath, TextStaysText) {
  write("corpus/a.txt", "hello\n");
  write("corpus/b", "world\n");
  const auto dir = resolve_data_path((dir_ / "corpus").string());
  EXPECT_TRUE(dir.is_text());
  ASSERT_EQ(dir.files.size(), 1u);
  EXPECT_EQ(dir.files[0].path, dir_ / "corpus");  // the caller's text route lists it
  EXPECT_TRUE(resolve_data_path((dir_ / "corpus/a.txt").string()).is_text());
  const auto glob = resolve_data_path((dir_ / "corpus/*.txt").string());
  EXPECT_TRUE(glob.is_text());
  EXPECT_EQ(glob.files.size(), 1u);
  expect_message(config_error([&] { RecordStream s(dir); }), {"plain text"});
}

TEST_F(DataPath, SaveToDiskDirectoryByItsStateJsonAndDatasetDictRefused) {
  write("saved/state.json", R"({"_data_files": [{"filename": "data-00001-of-00002.arrow"},
                                               {"filename": "data-00000-of-00002.arrow"}],
                               "_fingerprint": "x", "_split": null})");
  write("saved/data-00000-of-00002.arrow", "");
  write("saved/data-00001-of-00002.arrow", "");
  const auto saved = resolve_data_path((dir_ / "saved").string());
  EXPECT_TRUE(saved.saved_dataset);
  ASSERT_EQ(saved.files.size(), 2u);
  EXPECT_EQ(saved.files[0].path.filename(), "data-00001-of-00002.arrow");  // state.json's order
  EXPECT_EQ(saved.files[0].format, FileFormat::ARROW);

  write("missing/state.json", R"({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})");
  expect_message(config_error([&] { resolve_data_path((dir_ / "missing").string()); }),
                 {"state.json", "data-00000-of-00001.arrow", "does not exist"});
  write("notds/state.json", R"({"step": 3})");
  expect_message(config_error([&] { resolve_data_path((dir_ / "notds").string()); }), {"_data_files"});
  write("dict/dataset_dict.json", R"({"splits": ["train", "test"]})");
  expect_message(config_error([&] { resolve_data_path((dir_ / "dict").string()); }),
                 {"DatasetDict", "train, test", "dict/train"});
}

// --- JSON records ------------------------------------------------------------------------------

TEST_F(JsonRecords, LinesWithTheirLineNumbersBlankLinesCrlfAndBom) {
  const auto path = write("a.jsonl", "\xEF\xBB\xBF{\"text\": \"one\", \"n\": 1}\r\n\n   \n{\"text\": \"two\"}\n"
                                     "{\"text\": \"three\", \"nested\": {\"x\": [1, 2.5, null, true]}}");
  const auto records = all_records(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].value, json({{"text", "one"}, {"n", 1}}));
  EXPECT_EQ(records[0].origin.line, 1);
  EXPECT_EQ(records[1].origin.line, 4);
  EXPECT_EQ(records[1].origin.row, 1);
  EXPECT_EQ(records[2].origin.line, 5);
  EXPECT_EQ(records[2].value["nested"]["x"], json::parse("[1, 2.5, null, true]"));
  EXPECT_EQ(records[1].origin.str(), path + " line 4");
}

TEST_F(JsonRecords, AJsonArrayOfObjectsOrStrings) {
  const auto objects = write("a.json", "[\n  {\"text\": \"x, ]\\\" {\"},\n  {\"text\": \"y\"}\n]\n");
  const auto records = all_records(objects);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].value["text"], "x, ]\" {");
  EXPECT_EQ(records[1].origin.line, 3);
  const auto strings = write("s.json", R"(["first", "second"])");
  const auto texts = all_records(strings);
  ASSERT_EQ(texts.size(), 2u);
  EXPECT_EQ(texts[1].value, json({{"text", "second"}}));  // datasets' rule for a list of strings
  const auto bad = write("bad.json", "[\n {\"text\": \"a\"},\n {\"text\": tru}\n]");
  expect_message(config_error([&] { all_records(bad); }), {"bad.json line 3", "element 1", "malformed JSON"});
  const auto open = write("open.json", "[{\"text\": \"a\"},\n");
  expect_message(config_error([&] { all_records(open); }), {"open.json", "not closed"});
  const auto number = write("num.json", "[1, 2]");
  expect_message(config_error([&] { all_records(number); }), {"element 0", "a number"});
}

TEST_F(JsonRecords, AMalformedLineNamesTheFileTheLineAndTheReason) {
  const auto path = write("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": \"missing quote}\n");
  const std::string msg = config_error([&] { all_records(path); });
  expect_message(msg, {"bad.jsonl line 3", "malformed JSON", "byte"});
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;  // the reason, not nlohmann's prefix
  const auto array_line = write("arr.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n");
  expect_message(config_error([&] { all_records(array_line); }), {"arr.jsonl line 2", "JSON array", "object"});
}

TEST_F(JsonRecords, InvalidUtf8IsRefusedWithItsByteOffset) {
  const auto path = write("utf8.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"ab\xC3\x28\"}\n");
  expect_message(config_error([&] { all_records(path); }), {"utf8.jsonl line 2", "invalid UTF-8", "byte 12"});
  // Overlong forms, surrogates and bytes above U+10FFFF are not UTF-8 either.
  for (const std::string bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF"}) {
    const auto p = write("bad.jsonl", "{\"t\": \"" + bad + "\"}\n");
    expect_message(config_error([&] { all_records(p); }), {"line 1", "byte 7"});
  }
  const auto ok = write("ok.jsonl", "{\"t\": \"é€𝄞 漢字 👩‍💻\"}\n");
  EXPECT_EQ(all_records(ok).size(), 1u);
}

TEST_F(JsonRecords, GzipAndZstdStreamAndRefuseWhatTheyAreNot) {
  std::string lines;
  for (int i = 0; i < 5000; ++i) lines += fmt::format("{{\"text\": \"line {} {}\"}}\n", i, std::string(i % 97, 'x'));
  // Two gzip members and two zstd frames, as `cat a.gz b.gz` makes them.
  const auto gz = write("a.jsonl.gz", gzip(lines.substr(0, 1000)) + gzip(lines.substr(1000)));
  const auto zs = write("a.jsonl.zst", zstd(lines.substr(0, 70000)) + zstd(lines.substr(70000)));
  for (const auto& path : {gz, zs}) {
    const auto records = all_records(path);
    ASSERT_EQ(records.size(), 5000u) << path;
    EXPECT_EQ(records[4999].value["text"], fmt::format("line 4999 {}", std::string(4999 % 97, 'x')));
    EXPECT_EQ(records[4999].origin.line, 5000);
  }
  const auto plain_gz = write("plain.jsonl.gz", lines);
  expect_message(config_error([&] { all_records(plain_gz); }), {"plain.jsonl.gz", "not a valid gzip"});
  const auto plain_zst = write("plain.jsonl.zst", lines);
  expect_message(config_error([&] { all_records(plain_zst); }), {"plain.jsonl.zst", "not a valid zstd"});
  const std::string whole = gzip(lines);
  const auto cut = write("cut.jsonl.gz", whole.substr(0, whole.size() / 2));
  expect_message(config_error([&] { all_records(cut); }), {"cut.jsonl.gz", "truncated"});
  const auto parquet_named_jsonl = write("p.jsonl", std::string("PAR1\x15\x04", 6) + "binary");
  expect_message(config_error([&] { all_records(parquet_named_jsonl); }), {"p.jsonl", "not JSON", "Parquet"});
}

TEST_F(JsonRecords, AnEmptyDatasetIsRefusedNamingThePath) {
  write("empty/a.jsonl", "");
  write("empty/b.jsonl", "\n\n");
  const std::string path = (dir_ / "empty").string();
  expect_message(config_error([&] { all_records(path); }), {path, "no records", "2 files"});
  const auto array = write("e.json", " [ ] ");
  expect_message(config_error([&] { all_records(array); }), {"e.json", "no records"});
}

// --- examples ----------------------------------------------------------------------------------

TEST_F(Examples, TextPromptCompletionAndMessagesAsTrlReadsThem) {
  const auto text = write("t.jsonl", "{\"text\": \"a\", \"id\": 1}\n{\"text\": \"b\", \"id\": 2}\n");
  auto ex = all_examples(text);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].kind, ExampleKind::TEXT);
  EXPECT_EQ(ex[1].text, "b");
  EXPECT_EQ(ex[1].to_json(), json({{"text", "b"}}));

  const auto body = write("body.jsonl", "{\"body\": \"x\", \"text\": 5}\n");
  EXPECT_EQ(all_examples(body, nullptr, {.text_field = "body"})[0].text, "x");

  const auto pc = write("pc.jsonl", "{\"prompt\": \"2+2=\", \"completion\": \"4\", \"text\": \"ignored\"}\n");
  ex = all_examples(pc);
  EXPECT_EQ(ex[0].kind, ExampleKind::PROMPT_COMPLETION);
  EXPECT_EQ(ex[0].prompt, "2+2=");
  EXPECT_EQ(ex[0].completion, "4");

  const auto conv = write("conv.jsonl",
                          R"({"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "hello"}]})"
                          "\n");
  ex = all_examples(conv);
  EXPECT_EQ(ex[0].kind, ExampleKind::CONVERSATIONAL_PROMPT_COMPLETION);
  EXPECT_EQ(ex[0].messages[0]["content"], "hi");
  EXPECT_EQ(ex[0].completion_messages[0]["role"], "assistant");

  const auto chat = write("chat.jsonl",
                          R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},)"
                          R"( {"role": "assistant", "content": null, "tool_calls": [{"name": "f"}]}]})"
                          "\n");
  ex = all_examples(chat);
  EXPECT_EQ(ex[0].kind, ExampleKind::MESSAGES);
  EXPECT_EQ(ex[0].messages.size(), 3u);
  EXPECT_EQ(ex[0].to_json()["messages"][1]["content"], "hi");
}

TEST_F(Examples, EmptyTextIsSkippedAndCounted) {
  const auto path = write("e.jsonl", "{\"text\": \"a\"}\n{\"text\": \"\"}\n{\"text\": \"b\"}\n{\"text\": \"\"}\n");
  ExampleReader counts(resolve_data_path(path));
  const auto ex = all_examples(path, &counts);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[1].text, "b");
  EXPECT_EQ(ex[1].origin.line, 3);
  EXPECT_EQ(counts.records(), 4);
  EXPECT_EQ(counts.skipped(), 2);
  EXPECT_EQ(counts.examples(), 2);
  const auto pc = write("pc.jsonl", "{\"prompt\": \"p\", \"completion\": \"\"}\n{\"prompt\": \"\", \"completion\": \"c\"}\n");
  ExampleReader pc_counts(resolve_data_path(pc));
  EXPECT_EQ(all_examples(pc, &pc_counts).size(), 1u);  // an empty prompt is fine, an empty completion not
  EXPECT_EQ(pc_counts.skipped(), 1);
  const auto none = write("none.jsonl", "{\"text\": \"\"}\n{\"text\": \"\"}\n");
  expect_message(config_error([&] { all_examples(none); }), {"none.jsonl", "no examples", "2 records"});
}

TEST_F(Examples, AMissingFieldIsNamedWithTheRecordsFields) {
  const auto none = write("n.jsonl", "{\"title\": \"t\", \"body\": \"b\"}\n");
  expect_message(config_error([&] { all_examples(none); }),
                 {"n.jsonl line 1", "no field 'text'", "data.dataset_text_field", "title, body"});
  const auto later = write("l.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\", \"id\": 3}\n");
  expect_message(config_error([&] { all_examples(later); }), {"l.jsonl line 2", "no field 'text'", "txt, id"});
  const auto prompt_only = write("p.jsonl", "{\"prompt\": \"a\"}\n");
  expect_message(config_error([&] { all_examples(prompt_only); }), {"'prompt' without a 'completion'"});
}

TEST_F(Examples, AWrongTypeNamesTheFieldTheFileAndTheLine) {
  const auto num = write("w.jsonl", "{\"text\": \"a\"}\n{\"text\": 42}\n");
  expect_message(config_error([&] { all_examples(num); }), {"w.jsonl line 2", "field 'text'", "a number", "expected a string"});
  const auto null_text = write("z.jsonl", "{\"text\": null}\n");
  expect_message(config_error([&] { all_examples(null_text); }), {"z.jsonl line 1", "field 'text' is null"});
  const auto msgs = write("m.jsonl", "{\"messages\": \"hi\"}\n");
  expect_message(config_error([&] { all_examples(msgs); }), {"m.jsonl line 1", "'messages' is a string", "list of messages"});
  const auto role = write("r.jsonl", R"({"messages": [{"role": "user", "content": "a"}, {"content": "b"}]})" "\n");
  expect_message(config_error([&] { all_examples(role); }), {"r.jsonl line 1", "messages[1]", "'role'", "content"});
  const auto parts = write("c.jsonl", R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})" "\n");
  expect_message(config_error([&] { all_examples(parts); }), {"messages[0].content is an array", "multimodal"});
  const auto mixed = write("x.jsonl", R"({"prompt": [{"role": "user", "content": "a"}], "completion": "b"})" "\n");
  expect_message(config_error([&] { all_examples(mixed); }), {"x.jsonl line 1", "'completion' is a string"});
}

}  // namespace
