// Renders the cases tests/unit/chat_templates_hf.py writes, with fsdpp's chat templates, and
// prints what came out as JSON for the script to compare with transformers':
//
//   fsdpp_chat_template_tool CASES.json > RESULTS.json
//
// A case: {"template": PATH, "kind": "chat" | "prompt_completion", "messages" | "prompt" +
// "completion", "tools", "special_tokens", "extra", "add_generation_prompt", "now" (seconds
// since the epoch for strftime_now)}. A result: {"text" | "text_error", "spans" | "spans_error",
// "source"}; spans are [begin, end) byte offsets.
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fsdpp/data/chat_render.h"
#include "fsdpp/data/chat_template.h"

using Json = nlohmann::ordered_json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Json render_case(const Json& c) {
  Json out = Json::object();
  fsdpp::data::ChatTemplate tmpl = fsdpp::data::ChatTemplate::parse(read_file(c.at("template").get<std::string>()));
  if (c.contains("now")) {
    const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(c["now"].get<int64_t>()));
    tmpl = tmpl.with_clock([at] { return at; });
  }
  fsdpp::data::ChatRenderOptions options;
  options.special_tokens = c.value("special_tokens", Json::object());
  options.extra = c.value("extra", Json::object());
  options.tools = c.value("tools", Json());
  options.add_generation_prompt = c.value("add_generation_prompt", false);
  const bool prompt_completion = c.value("kind", "chat") == "prompt_completion";
  Json messages = prompt_completion ? c.at("prompt") : c.at("messages");
  if (prompt_completion)
    for (const auto& m : c.at("completion")) messages.push_back(m);
  try {
    out["text"] = fsdpp::data::render_conversation(tmpl, messages, options);
  } catch (const std::exception& e) {
    out["text_error"] = e.what();
  }
  try {
    const fsdpp::data::RenderedChat chat =
        prompt_completion ? fsdpp::data::render_prompt_completion(tmpl, c.at("prompt"), c.at("completion"), options)
                          : fsdpp::data::render_chat(tmpl, c.at("messages"), options);
    if (chat.text != out.value("text", "")) out["spans_error"] = "render_chat's text differs from render_conversation's";
    Json spans = Json::array();
    for (const auto& s : chat.assistant_spans) spans.push_back({s.begin, s.end});
    out["spans"] = spans;
    out["source"] = chat.source == fsdpp::data::RenderedChat::SpanSource::kGenerationTags ? "tags" : "prefixes";
  } catch (const std::exception& e) {
    out["spans_error"] = e.what();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fsdpp_chat_template_tool CASES.json\n";
    return 2;
  }
  const Json cases = Json::parse(read_file(argv[1]));
  Json results = Json::array();
  for (const auto& c : cases) results.push_back(render_case(c));
  std::cout << results.dump(-1, ' ', false, Json::error_handler_t::strict) << "\n";
  return 0;
}
