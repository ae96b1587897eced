// JSON data files: JSON Lines read line by line from a (decompressing) byte source, or one JSON
// array read whole and cut into its elements, as datasets' json loader reads both.
#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "byte_source.h"
#include "fsdpp/common/error.h"
#include "record_readers.h"
#include "utf8_validate.h"

namespace fsdpp::data::detail {
namespace {

constexpr size_t kChunk = size_t{1} << 20;
constexpr std::string_view kBom = "\xEF\xBB\xBF";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 5: syntax
// error while parsing value - ..."; the position is said by the caller, in the file's terms.
std::string parser_reason(const std::string& what) {
  const size_t column = what.find("column ");
  const size_t colon = what.find(": ", column == std::string::npos ? 0 : column);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// What a file that should be JSON looks like when its first bytes say it is something else.
std::string binary_kind(std::string_view head) {
  if (head.starts_with("PAR1")) return "a Parquet file (it starts with PAR1): name it .parquet";
  if (head.starts_with("ARROW1")) return "an Arrow IPC file (it starts with ARROW1): name it .arrow";
  if (head.starts_with("\xFF\xFF\xFF\xFF")) return "an Arrow IPC stream: name it .arrow";
  if (head.starts_with("\x1F\x8B")) return "gzip-compressed data: name it .jsonl.gz";
  if (head.starts_with("\x28\xB5\x2F\xFD")) return "zstd-compressed data: name it .jsonl.zst";
  if (head.starts_with("PK\x03\x04")) return "a zip archive: unpack it";
  if (head.substr(0, 4096).find('\0') != std::string_view::npos) return "binary data (it has NUL bytes)";
  return {};
}

[[noreturn]] void throw_bad_utf8(const std::string& file, int64_t line, size_t offset) {
  FSDPP_THROW(ConfigError, "[data] {} line {}: invalid UTF-8 at byte {} of the line; data files "
              "must be UTF-8 text (tokenizers read only valid Unicode): fix or drop the line",
              file, line, offset);
}

// `text` parsed as one JSON value; ConfigError naming the place and the parser's reason.
// `element` < 0: a line of JSON Lines; else the index of an element of a JSON array.
nlohmann::ordered_json parse_value(std::string_view text, const std::string& file, int64_t line,
                           int64_t element) {
  try {
    return nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const nlohmann::ordered_json::parse_error& e) {
    const size_t at = e.byte == 0 ? 0 : e.byte - 1;
    if (element < 0) {
      FSDPP_THROW(ConfigError, "[data] {} line {}: malformed JSON at byte {} of the line: {}", file,
                  line, at, parser_reason(e.what()));
    }
    FSDPP_THROW(ConfigError, "[data] {} line {}: element {} of the JSON array is malformed JSON at "
                "byte {} of the element: {}", file, line, element, at, parser_reason(e.what()));
  }
}

class JsonLinesReader : public RecordReader {
 public:
  JsonLinesReader(std::string file, std::unique_ptr<ByteSource> source, std::vector<char> buffer,
                  size_t begin, size_t end)
      : file_(std::move(file)), source_(std::move(source)), buf_(std::move(buffer)), begin_(begin), end_(end) {}

  bool next(Record& record) override {
    std::string_view line;
    while (next_line(line)) {
      ++line_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (std::all_of(line.begin(), line.end(), is_space)) continue;  // as pyarrow's reader does
      if (const size_t bad = invalid_utf8_offset(line); bad != kValidUtf8) throw_bad_utf8(file_, line_, bad);
      nlohmann::ordered_json value = parse_value(line, file_, line_, -1);
      FSDPP_CHECK_AS(ConfigError, value.is_object(),
                     "[data] {} line {}: a JSON {} where a record (a JSON object) was expected; each "
                     "line of a JSON Lines file is one object such as {{\"text\": \"...\"}}",
                     file_, line_, value.type_name());
      record.value = std::move(value);
      record.origin = {file_, line_, row_++};
      return true;
    }
    return false;
  }

 private:
  // The next line without its '\n'; the view lives until the next call.
  bool next_line(std::string_view& line) {
    for (;;) {
      const char* start = buf_.data() + begin_;
      if (const void* nl = std::memchr(start, '\n', end_ - begin_)) {
        const size_t len = static_cast<const char*>(nl) - start;
        line = {start, len};
        begin_ += len + 1;
        return true;
      }
      if (eof_) {
        if (begin_ == end_) return false;
        line = {start, end_ - begin_};  // the last line, without a final newline
        begin_ = end_;
        return true;
      }
      // Keep the partial line, make room (a line longer than the buffer grows it), read more.
      std::memmove(buf_.data(), start, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
      if (buf_.size() - end_ < kChunk / 2) buf_.resize(std::max(buf_.size() * 2, end_ + kChunk));
      const size_t n = source_->read(buf_.data() + end_, buf_.size() - end_);
      eof_ = n == 0;
      end_ += n;
    }
  }

  std::string file_;
  std::unique_ptr<ByteSource> source_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_ = 0, row_ = 0;
};

// One JSON array, read whole (datasets reads it whole too), cut into its elements by a scanner
// that knows strings and nesting, each element parsed alone so that an error names its line.
class JsonArrayReader : public RecordReader {
 public:
  JsonArrayReader(std::string file, std::string text, size_t open_bracket)
      : file_(std::move(file)), text_(std::move(text)), pos_(open_bracket + 1) {
    if (const size_t bad = invalid_utf8_offset(text_); bad != kValidUtf8) {
      const size_t line_start = text_.rfind('\n', bad == 0 ? 0 : bad - 1);
      const int64_t line = 1 + std::count(text_.begin(), text_.begin() + bad, '\n');
      throw_bad_utf8(file_, line, line_start == std::string::npos ? bad : bad - line_start - 1);
    }
    line_ = 1 + std::count(text_.begin(), text_.begin() + pos_, '\n');
  }

  bool next(Record& record) override {
    if (done_) return false;
    skip_space();
    FSDPP_CHECK_AS(ConfigError, pos_ < text_.size(),
                   "[data] {}: the JSON array is not closed: the file ends at line {} without its ']'",
                   file_, line_);
    if (text_[pos_] == ']') return finish();
    if (row_ > 0) {
      FSDPP_CHECK_AS(ConfigError, text_[pos_] == ',',
                     "[data] {} line {}: expected ',' or ']' after element {} of the JSON array, found '{}'",
                     file_, line_, row_ - 1, text_[pos_]);
      ++pos_;
      skip_space();
    }
    const size_t start = pos_;
    const int64_t line = line_;
    scan_element();
    nlohmann::ordered_json value =
        parse_value(std::string_view(text_).substr(start, pos_ - start), file_, line, row_);
    if (value.is_string()) value = nlohmann::ordered_json{{"text", std::move(value)}};  // datasets' rule
    FSDPP_CHECK_AS(ConfigError, value.is_object(),
                   "[data] {} line {}: element {} of the JSON array is a {}; the array's elements "
                   "are records (objects) or strings (each read as {{\"text\": ...}})",
                   file_, line, row_, value.type_name());
    record.value = std::move(value);
    record.origin = {file_, line, row_++};
    return true;
  }

 private:
  bool finish() {
    ++pos_;
    skip_space();
    FSDPP_CHECK_AS(ConfigError, pos_ == text_.size(),
                   "[data] {} line {}: text after the JSON array's closing ']'; a .json file is JSON "
                   "Lines or one array", file_, line_);
    done_ = true;
    return false;
  }

  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) {
      if (text_[pos_] == '\n') ++line_;
      ++pos_;
    }
  }

  // Moves pos_ past one value: a string, an object or array (to its matching close), or a scalar
  // (to the next ',' / ']' / space). Malformed values are left for the parser to describe.
  void scan_element() {
    int depth = 0;
    bool in_string = false;
    const size_t start = pos_;
    for (; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (c == '\n') ++line_;
      if (in_string) {
        if (c == '\\') {
          ++pos_;
        } else if (c == '"') {
          in_string = false;
          if (depth == 0) break;
        }
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) return;  // the array's own ']' after a scalar
        if (--depth == 0) break;
      } else if (depth == 0 && (c == ',' || is_space(c))) {
        return;
      }
    }
    FSDPP_CHECK_AS(ConfigError, pos_ < text_.size(),
                   "[data] {}: element {} of the JSON array, from line {}, is not closed before the "
                   "file ends", file_, row_, 1 + std::count(text_.begin(), text_.begin() + start, '\n'));
    ++pos_;
  }

  std::string file_;
  std::string text_;
  size_t pos_;
  int64_t line_ = 1, row_ = 0;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<RecordReader> open_json_records(const DataFile& file) {
  const std::string path = file.path.string();
  auto source = open_byte_source(file);
  std::vector<char> buf(kChunk);
  size_t end = 0;
  // Enough of the start to see what the file is: a BOM, magic bytes, its first non-space byte.
  while (end < 4096) {
    const size_t n = source->read(buf.data() + end, buf.size() - end);
    if (n == 0) break;
    end += n;
  }
  std::string_view head(buf.data(), end);
  size_t begin = head.starts_with(kBom) ? kBom.size() : 0;
  if (const std::string kind = binary_kind(head.substr(begin)); !kind.empty()) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not JSON, which its extension says it is: it looks like {}",
                path, kind);
  }
  size_t first = begin;
  while (first < end && is_space(buf[first])) ++first;
  if (first < end && buf[first] == '[') {
    std::string text(buf.data() + begin, end - begin);
    for (size_t n; (n = source->read(buf.data(), buf.size())) > 0;) text.append(buf.data(), n);
    return std::make_unique<JsonArrayReader>(path, std::move(text), first - begin);
  }
  return std::make_unique<JsonLinesReader>(path, std::move(source), std::move(buf), begin, end);
}

}  // namespace fsdpp::data::detail
