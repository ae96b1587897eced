// fsdpp-tokenize TOKENIZER: text on stdin -> ids on stdout, or back with --decode
// (docs/tokenizers.md).
//   printf 'Hello world\n' | fsdpp-tokenize Meta-Llama-3-8B            # 9906 1917
//   printf '9906 1917\n' | fsdpp-tokenize Meta-Llama-3-8B --decode      # Hello world
// TOKENIZER is what data.tokenizer takes: byte, a SentencePiece .model, a tokenizer.json or a
// directory holding one (make_tokenizer).
//
// Records: by default one per line of stdin. A line ends at "\n"; a "\r" right before it goes
// with it ("\r\n" ends a line too); a lone "\r" is text. The last line needs no "\n"; stdin that
// ends with "\n" has no empty line after it. --null: records end at NUL bytes instead (newlines
// are text), --whole: all of stdin is one record. One output line per record: its ids separated
// by spaces (an empty record gives an empty line).
// --decode reads one record of ids per line and prints each text followed by "\n" (by NUL with
// --null, so that texts with newlines stay apart). --info prints what the tokenizer is, as JSON:
// its name, vocab_size and special token ids (null where it has none), whether it has a chat
// template.
// stdin that is not UTF-8 is refused before anything is tokenized, naming the byte offset: the
// Hugging Face tokenizers library takes only valid text.
#include <CLI/CLI.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/data/utf8.h"

namespace {

enum class Records { kLines, kNul, kWhole };

// stdin cut into records (the header's rules).
std::vector<std::string_view> records(std::string_view in, Records mode) {
  std::vector<std::string_view> out;
  if (mode == Records::kWhole) return {in};
  const char end = mode == Records::kNul ? '\0' : '\n';
  size_t start = 0;
  while (start < in.size()) {
    size_t stop = in.find(end, start);
    if (stop == std::string_view::npos) stop = in.size();
    std::string_view r = in.substr(start, stop - start);
    if (mode == Records::kLines && !r.empty() && r.back() == '\r' && stop < in.size()) r.remove_suffix(1);
    out.push_back(r);
    start = stop + 1;
  }
  return out;
}

std::vector<int32_t> parse_ids(std::string_view line, size_t line_number) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i == line.size()) break;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(line.data() + i, line.data() + j, id);
    FSDPP_CHECK_AS(ConfigError, ec == std::errc() && ptr == line.data() + j,
                   "[tokenize] line {}: '{}' is not an id; expected integers separated by spaces",
                   line_number, line.substr(i, j - i));
    ids.push_back(id);
    i = j;
  }
  return ids;
}

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  char buf[16];
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) out += ' ';
    const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), ids[k]);
    out.append(buf, ptr);
  }
  out += '\n';
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdpp-tokenize: text on stdin to token ids (one line of ids per line of text), or "
               "ids back to text with --decode"};
  std::string spec;
  bool decode = false, add_special = false, skip_special = false, nul = false, whole = false, timing = false,
       info = false;
  app.add_option("TOKENIZER", spec,
                 "byte, a SentencePiece .model file, a tokenizer.json, or a directory holding one")
      ->required();
  app.add_flag("--decode", decode, "read lines of ids, print the texts");
  app.add_flag("--add-special-tokens", add_special,
               "add the tokenizer's special tokens around each text (BOS/EOS, as its post-processor "
               "or tokenizer_config.json says)");
  app.add_flag("--skip-special-tokens", skip_special, "with --decode: leave special tokens out");
  app.add_flag("-0,--null", nul, "records end at NUL bytes instead of newlines (--decode: texts are "
               "printed followed by NUL)");
  app.add_flag("--whole", whole, "all of stdin is one text");
  app.add_flag("--info", info, "print the tokenizer's name, vocab_size and special token ids as JSON");
  app.add_flag("--time", timing, "print to stderr the time spent tokenizing, without start-up and I/O");
  CLI11_PARSE(app, argc, argv);
  try {
    FSDPP_CHECK_AS(ConfigError, !(nul && whole), "[tokenize] --null and --whole exclude each other");
    FSDPP_CHECK_AS(ConfigError, decode || !skip_special, "[tokenize] --skip-special-tokens needs --decode");
    FSDPP_CHECK_AS(ConfigError, !decode || !add_special, "[tokenize] --add-special-tokens is for encoding");
    FSDPP_CHECK_AS(ConfigError, !decode || !whole, "[tokenize] --whole is for encoding");
    const auto tokenizer = fsdpp::data::make_tokenizer(spec);
    if (info) {
      const auto special = tokenizer->special_token_ids();
      auto id = [](std::optional<int32_t> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
      const nlohmann::ordered_json j = {{"name", tokenizer->name()},
                                        {"vocab_size", tokenizer->vocab_size()},
                                        {"bos", id(special.bos)},
                                        {"eos", id(special.eos)},
                                        {"pad", id(special.pad)},
                                        {"unk", id(special.unk)},
                                        {"chat_template", tokenizer->chat_template().has_value()}};
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::string in;
    for (char buf[1 << 16]; const size_t n = std::fread(buf, 1, sizeof(buf), stdin);) in.append(buf, n);
    std::string out;
    out.reserve(in.size());
    double seconds = 0;
    size_t ids_count = 0;
    if (decode) {
      const auto lines = records(in, Records::kLines);
      for (size_t i = 0; i < lines.size(); ++i) {
        const auto ids = parse_ids(lines[i], i + 1);
        const auto t0 = std::chrono::steady_clock::now();
        out += skip_special ? tokenizer->decode_skipping_special_tokens(ids) : tokenizer->decode(ids);
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ids_count += ids.size();
        out += nul ? '\0' : '\n';
      }
    } else {
      if (const auto bad = fsdpp::data::first_invalid_utf8(in)) {
        FSDPP_THROW(ConfigError,
                    "[tokenize] stdin is not UTF-8 at byte offset {} (byte 0x{:02x}); expected UTF-8 "
                    "text (the Hugging Face tokenizers library takes only valid text)",
                    *bad, static_cast<unsigned char>(in[*bad]));
      }
      for (const auto r : records(in, nul ? Records::kNul : whole ? Records::kWhole : Records::kLines)) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = add_special ? tokenizer->encode_with_special_tokens(r) : tokenizer->encode(r);
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ids_count += ids.size();
        append_ids(out, ids);
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    if (timing) {
      std::fprintf(stderr, "[tokenize] %s %zu bytes, %zu ids in %.3f s: %.2f MB/s\n",
                   decode ? "decoded" : "encoded", decode ? out.size() : in.size(), ids_count, seconds,
                   seconds > 0 ? (decode ? out.size() : in.size()) / seconds / 1e6 : 0.0);
    }
  } catch (const fsdpp::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
