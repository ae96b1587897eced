// The chat-template interpreter piece by piece (whitespace, expressions, statements, Python's
// values, filters, errors) with the outputs jinja2 gives inside transformers, and the
// assistant turns render_chat finds. tests/unit/chat_templates_hf.py compares whole published
// templates with transformers itself.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fsdpp/common/error.h"
#include "fsdpp/data/chat_render.h"
#include "fsdpp/data/chat_template.h"

namespace fs = std::filesystem;
using fsdpp::ConfigError;
using fsdpp::data::ChatRenderOptions;
using fsdpp::data::ChatTemplate;
using fsdpp::data::RenderedChat;
using fsdpp::data::TextSpan;
using Json = nlohmann::ordered_json;

namespace {

std::string render(const std::string& source, const Json& context = Json::object()) {
  return ChatTemplate::parse(source).render(context);
}

// The ConfigError a template throws, or "" when it renders.
std::string error_of(const std::string& source, const Json& context = Json::object()) {
  try {
    ChatTemplate::parse(source).render(context);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

fs::path template_dir() {
#ifdef FSDPP_SOURCE_DIR
  return fs::path(FSDPP_SOURCE_DIR) / "tests" / "data" / "chat_templates";
#else
  return fs::path(__FILE__).parent_path().parent_path() / "data" / "chat_templates";
#endif
}

ChatTemplate published(const std::string& name) {
  std::ifstream in(template_dir() / name, std::ios::binary);
  EXPECT_TRUE(in) << (template_dir() / name);
  std::ostringstream s;
  s << in.rdbuf();
  return ChatTemplate::parse(s.str());
}

std::string span_text(const RenderedChat& chat, size_t i) {
  const TextSpan s = chat.assistant_spans.at(i);
  return chat.text.substr(s.begin, s.end - s.begin);
}

const Json kHelloChat = Json::parse(R"([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}])");

// A ChatML template such as Qwen2.5's, small enough to read in the test.
const char* const kChatML =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

// --- whitespace: trim_blocks, lstrip_blocks, '-', comments, raw, line breaks ---

TEST(ChatTemplateWhitespace, BlockTagsOnTheirOwnLineLeaveNoTrace) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n  {# c #}\n y  {#- c #} z"), "  x\n y z");
  EXPECT_EQ(render("{% for i in [1, 2] %}\n{{ i }}\n{% endfor %}\n"), "1\n2\n");
}

TEST(ChatTemplateWhitespace, MinusStripsAndPlusKeeps) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true -%}\n  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}\n {% if true +%}\nm{% endif %}"), "  k\nm");
  EXPECT_EQ(render("{{ 'x' }}\n{{ 'y' }}\n"), "x\ny");  // variables keep their newline; the last one goes
}

TEST(ChatTemplateWhitespace, RawBlocksAndLineBreaks) {
  EXPECT_EQ(render("{% raw %}{{ not }} {% x %}{% endraw %}"), "{{ not }} {% x %}");
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
}

// --- expressions: Python's values and operators ---

TEST(ChatTemplateExpressions, PrintsValuesAsPythonDoes) {
  EXPECT_EQ(render("{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e-5 }}|{{ 1.5e20 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ -0.0 }}"),
            "None|True|1.0|1e-05|1.5e+20|0.30000000000000004|1e+16|-0.0");
  EXPECT_EQ(render("{{ [1, 'a', none, \"it's\"] }} {{ {'k': [true]} }} {{ ('a',) }}"),
            "[1, 'a', None, \"it's\"] {'k': [True]} ('a',)");
}

TEST(ChatTemplateExpressions, ArithmeticIsPythons) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }}"),
            "3 -4 2 3.5 2.0 0.5 1024");
  EXPECT_EQ(render("{{ - 2 ** 2 }} {{ 2 + 3 * 4 }} {{ 10 - 2 - 3 }} {{ 'ab' * 2 }} {{ [1] + [2] }}"),
            "4 14 5 abab [1, 2]");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ true == 1 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "True True True False");
  EXPECT_EQ(render("{{ true and 'x' }} {{ false or 0 or 'y' }} {{ [] or 'e' }} {{ not none }}"), "x y e True");
}

TEST(ChatTemplateExpressions, FiltersBindTighterThanOperators) {
  // Llama 3's '...\n\n' + message['content'] | trim + '<|eot_id|>' trims the content only.
  EXPECT_EQ(render("{{ '[' + c | trim + ']' }}", {{"c", "  x  "}}), "[x]");
  EXPECT_EQ(render("{{ not x is defined }} {{ -1 | abs }}"), "True 1");
  EXPECT_EQ(render("{{ 'a' if 0 else 'b' if 1 else 'c' }}|{{ 'x' if false }}|"), "b||");
}

TEST(ChatTemplateExpressions, SubscriptsSlicesAndStringsCountCharacters) {
  EXPECT_EQ(render("{{ m[::-1] }} {{ m[1:] }} {{ m[-1] }} {{ m[5] }}|", {{"m", {1, 2, 3}}}), "[3, 2, 1] [2, 3] 3 |");
  EXPECT_EQ(render("{{ s[1:3] }} {{ s|length }} {{ s[::-1] }}", {{"s", "h\xc3\xa9llo"}}), "\xc3\xa9l 5 oll\xc3\xa9h");
  EXPECT_EQ(render("{{ d.a.b[1].c }} {{ d['a']['b'][0] }} {{ d.a.b.0 }}", {{"d", Json::parse(R"({"a": {"b": [1, {"c": 2}]}})")}}),
            "2 1 1");
}

TEST(ChatTemplateExpressions, StringAndDictMethods) {
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a b '.split() }} {{ 'a.b.c'.rsplit('.', 1) }} {{ 'xxaxx'.strip('x') }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a.b', 'c'] a");
  EXPECT_EQ(render("{{ c.startswith('<tool_response>') and c.endswith('</tool_response>') }}",
                   {{"c", "<tool_response>x</tool_response>"}}),
            "True");
  EXPECT_EQ(render("{{ 'Hello {} {x}'.format('w', x=2) }} {{ '%s=%d'|format('a', 3) }} {{ '%05.1f' % 2.25 }}"),
            "Hello w 2 a=3 002.2");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.get('z', 0) }}{{ d|length }}",
                   {{"d", Json::parse(R"({"b": 1, "a": 2})")}}),
            "b=1;a=2;02");
  EXPECT_EQ(render("{{ 'ÉCOLE'|lower }} {{ 'straße'|upper }} {{ 'hello world'|title }}"), "école STRASSE Hello World");
}

TEST(ChatTemplateExpressions, InAndTests) {
  EXPECT_EQ(render("{{ '</think>' in c }} {{ 1 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }}", {{"c", "a</think>b"}}),
            "True True True True");
  EXPECT_EQ(render("{{ u is defined }}{{ u is iterable }}{{ 's' is string }}{{ {} is mapping }}{{ true is number }}"
                   "{{ true is integer }}{{ none is none }}{{ 4 is divisibleby 2 }}{{ x is false }}",
                   {{"x", false}}),
            "FalseTrueTrueTrueTrueFalseTrueTrueTrue");
}

// --- undefined: printing nothing, failing when used ---

TEST(ChatTemplateUndefined, PrintsNothingAndFailsWhenUsed) {
  EXPECT_EQ(render("[{{ nothing }}{{ d.missing }}{{ nothing|length }}{{ nothing|default('d') }}]", {{"d", Json::object()}}), "[0d]");
  EXPECT_NE(error_of("{{ d.missing.deeper }}", {{"d", Json::object()}}).find("'dict object' has no attribute 'missing'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ nothing + 'a' }}").find("'nothing' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ messages[0].role }}", {{"messages", Json::array()}}).find("has no element 0"), std::string::npos);
}

// --- statements ---

TEST(ChatTemplateStatements, ForLoopsAndTheirScope) {
  EXPECT_EQ(render("{% for a in [1, 2, 3] if a != 2 %}{{ loop.index }}{{ loop.length }}{{ loop.last }}{% else %}E{% endfor %}"
                   "{% for a in [] %}x{% else %}E{% endfor %}"),
            "12False22TrueE");
  // A set inside a loop is gone at the next iteration and after the loop: jinja2's scoping,
  // why templates carry state in a namespace.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"), "12121");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}"
                   "{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.cycle('o', 'e') }}{{ loop.previtem }}{% endfor %}"), "oeaob");
}

TEST(ChatTemplateStatements, SetBlocksMacrosFiltersAndWith) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a + b }}{% set x %}hi {{ 1 }}{% endset %}{{ x|upper }}"), "3HI 1");
  EXPECT_EQ(render("{% macro f(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, 3) }}{{ f(b=5, a=0) }}"),
            "[12][13][05]");
  EXPECT_EQ(render("{% filter upper %}abc{{ 'd' }}{% endfilter %}{% with a = 1 %}{{ a }}{% endwith %}{{ a }}"), "ABCD1");
}

TEST(ChatTemplateStatements, GenerationBlocksRecordByteRanges) {
  const auto tmpl = ChatTemplate::parse("{% for m in ms %}<{% generation %}{{ m }}{% endgeneration %}>{% endfor %}");
  EXPECT_TRUE(tmpl.has_generation_tags());
  const auto out = tmpl.render_tracked({{"ms", {"a", "\xc3\xa9", "c"}}});
  EXPECT_EQ(out.text, "<a><\xc3\xa9><c>");
  EXPECT_EQ(out.generation_spans, (std::vector<TextSpan>{{1, 2}, {4, 6}, {8, 9}}));
  EXPECT_FALSE(ChatTemplate::parse("{{ 1 }}").has_generation_tags());
}

// --- tojson as transformers defines it ---

TEST(ChatTemplateJson, KeysInOrderNoHtmlEscapingNonAsciiKept) {
  const Json tool = Json::parse(R"({"type": "function", "function": {"name": "f", "description": "<é> & \"q\"\n", "n": 0.5}})");
  EXPECT_EQ(render("{{ t | tojson }}", {{"t", tool}}),
            R"({"type": "function", "function": {"name": "f", "description": "<é> & \"q\"\n", "n": 0.5}})");
  EXPECT_EQ(render("{{ {'a': {'b': []}, 'c': {}} | tojson(indent=2) }}"), "{\n  \"a\": {\n    \"b\": []\n  },\n  \"c\": {}\n}");
  EXPECT_EQ(render("{{ 'é\x01' | tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"),
            R"("\u00e9\u0001" {"a": 2, "b": 1})");
  EXPECT_NE(error_of("{{ nothing | tojson }}").find("Object of type Undefined is not JSON serializable"), std::string::npos);
}

TEST(ChatTemplateJson, AnUnorderedContextPrintsSortedKeys) {
  const auto tmpl = ChatTemplate::parse("{{ t | tojson }}");
  EXPECT_EQ(tmpl.render(nlohmann::json{{"t", {{"z", 1}, {"a", 2}}}}), R"({"a": 2, "z": 1})");
}

TEST(ChatTemplateGlobals, StrftimeNowReadsTheInjectedClock) {
  std::tm when{};
  when.tm_year = 2024 - 1900;
  when.tm_mon = 6;
  when.tm_mday = 26;
  when.tm_hour = 12;
  const auto at = std::chrono::system_clock::from_time_t(std::mktime(&when));
  const auto tmpl = ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}").with_clock([at] { return at; });
  EXPECT_EQ(tmpl.render(Json::object()), "26 Jul 2024");
}

// --- errors ---

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  auto parse_error = [](const std::string& source) {
    try {
      ChatTemplate::parse(source);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(parse_error("{{ 1 + }}"),
            "[data] chat template: syntax error at line 1, column 8: unexpected '}}'; an expression is expected");
  EXPECT_EQ(parse_error("line one\n{% for m in messages %}\n  {{ m.role ) }}\n{% endfor %}"),
            "[data] chat template: syntax error at line 3, column 13: unexpected ')'");
  EXPECT_NE(parse_error("{% if x %}\nno end").find("line 2, column 7: unexpected end of template; expected 'elif' or "
                                                   "'else' or 'endif' to close the 'if' tag of line 1"),
            std::string::npos);
  EXPECT_NE(parse_error("{% do x %}").find("unknown tag 'do'"), std::string::npos);
  EXPECT_NE(parse_error("{% include 'x' %}").find("'include' tag is not supported"), std::string::npos);
  EXPECT_NE(parse_error("{{ 'open }}").find("unterminated string literal"), std::string::npos);
}

TEST(ChatTemplateErrors, RaiseExceptionIsTheTemplatesMessage) {
  EXPECT_EQ(error_of("{% if messages|length > 1 %}{{ raise_exception('Only one message, please') }}{% endif %}",
                     {{"messages", {1, 2}}}),
            "[data] chat template: Only one message, please");
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheLineAndWhatWasWrong) {
  const std::string unknown = error_of("a\n\n{{ x | frobnicate }}", {{"x", 1}});
  EXPECT_EQ(unknown.rfind("[data] chat template: line 3: unknown filter 'frobnicate'; the filters supported are: abs, ", 0), 0u)
      << unknown;
  EXPECT_NE(unknown.find("tojson"), std::string::npos);
  // jinja2 looks a filter up when it runs: one in a branch not taken is no error.
  EXPECT_EQ(render("{% if false %}{{ x | frobnicate }}{% endif %}ok"), "ok");
  EXPECT_EQ(error_of("{{ x is frobnicated }}"), "[data] chat template: line 1: unknown test 'frobnicated'; the tests "
                                                "supported are: boolean, callable, defined, divisibleby, eq, equalto, "
                                                "escaped, even, false, filter, float, ge, greaterthan, gt, in, integer, "
                                                "iterable, le, lessthan, lower, lt, mapping, ne, none, number, odd, "
                                                "sameas, sequence, string, test, true, undefined, upper");
  EXPECT_EQ(error_of("{{ 'a' + m.content }}", {{"m", Json::object({{"content", nullptr}})}}),
            "[data] chat template: line 1: can only concatenate str (not \"NoneType\") to str");
  EXPECT_NE(error_of("{{ l.append(1) }}", {{"l", {1}}}).find("access to attribute 'append' of 'list' object is unsafe"),
            std::string::npos);
}

// --- render_chat: the assistant turns ---

TEST(ChatRender, FindsTurnsByPrefixesWithTheEndOfTurn) {
  const auto tmpl = ChatTemplate::parse(kChatML);
  const RenderedChat chat = fsdpp::data::render_chat(tmpl, kHelloChat, {});
  EXPECT_EQ(chat.text, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi!<|im_end|>\n");
  EXPECT_EQ(chat.source, RenderedChat::SpanSource::kPrefixes);
  ASSERT_EQ(chat.assistant_spans.size(), 1u);
  EXPECT_EQ(span_text(chat, 0), "Hi!<|im_end|>\n");
}

TEST(ChatRender, GenerationTagsWinOverPrefixes) {
  const auto tmpl = ChatTemplate::parse(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}</s>"
      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}");
  const RenderedChat chat = fsdpp::data::render_chat(tmpl, kHelloChat, {});
  EXPECT_EQ(chat.source, RenderedChat::SpanSource::kGenerationTags);
  ASSERT_EQ(chat.assistant_spans.size(), 1u);
  EXPECT_EQ(span_text(chat, 0), "Hi!</s>");
}

TEST(ChatRender, ContextIsApplyChatTemplates) {
  // None-valued keys dropped, reasoning under "thinking" (first) and "reasoning_content",
  // tools and documents None, special tokens then extra kwargs, add_generation_prompt.
  const auto tmpl = ChatTemplate::parse(
      "{{ bos_token }}{{ messages | tojson }}|{{ tools is none }}{{ documents is none }}{{ flag }}{{ add_generation_prompt }}");
  ChatRenderOptions opts;
  opts.special_tokens = {{"bos_token", "<s>"}, {"flag", 1}};
  opts.extra = {{"flag", 2}};
  const Json messages = Json::parse(R"([{"role": "assistant", "content": "4", "tool_calls": null, "reasoning": "2+2"}])");
  EXPECT_EQ(fsdpp::data::render_conversation(tmpl, messages, opts),
            R"(<s>[{"thinking": "2+2", "role": "assistant", "content": "4", "reasoning": "2+2", "reasoning_content": "2+2"}]|TrueTrue2False)");
}

TEST(ChatRender, RefusesATemplateThatRewritesEarlierTurns) {
  // Like Qwen3: an assistant turn is rendered with its thinking only while it is the last.
  const auto tmpl = ChatTemplate::parse(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' and loop.last %}<think></think>{% endif %}"
      "{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}");
  const Json messages = Json::parse(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}])");
  try {
    fsdpp::data::render_chat(tmpl, messages, {});
    FAIL() << "render_chat found turns in a template that rewrites them";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot find assistant message 1 (of 4 messages)"), std::string::npos) << what;
    EXPECT_NE(what.find("render differently when later messages follow"), std::string::npos) << what;
    EXPECT_NE(what.find("{% generation %}"), std::string::npos) << what;
    EXPECT_NE(what.find("data.completion_only_loss"), std::string::npos) << what;
  }
  // One assistant turn at the end is found (its thinking included).
  const RenderedChat one = fsdpp::data::render_chat(tmpl, Json(std::vector<Json>(messages.begin(), messages.begin() + 2)), {});
  EXPECT_EQ(span_text(one, 0), "<think></think>b");
}

TEST(ChatRender, PromptCompletionSpanIsTheCompletion) {
  const auto tmpl = ChatTemplate::parse(kChatML);
  const RenderedChat chat = fsdpp::data::render_prompt_completion(
      tmpl, Json::parse(R"([{"role": "user", "content": "Name a colour."}])"),
      Json::parse(R"([{"role": "assistant", "content": "Blue."}])"), {});
  ASSERT_EQ(chat.assistant_spans.size(), 1u);
  EXPECT_EQ(span_text(chat, 0), "Blue.<|im_end|>\n");
  EXPECT_EQ(chat.assistant_spans[0].end, chat.text.size());
}

TEST(ChatRender, MessagesMustBeObjects) {
  const auto tmpl = ChatTemplate::parse(kChatML);
  EXPECT_THROW(fsdpp::data::render_chat(tmpl, Json::parse(R"(["hello"])"), {}), ConfigError);
  EXPECT_THROW(fsdpp::data::render_chat(tmpl, Json::object(), {}), ConfigError);
}

TEST(ChatRender, ManyThreadsRenderOneTemplate) {
  const auto tmpl = ChatTemplate::parse(kChatML);
  const std::string expected = fsdpp::data::render_conversation(tmpl, kHelloChat, {});
  std::vector<std::thread> threads;
  std::atomic<int> equal{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) equal += fsdpp::data::render_conversation(tmpl, kHelloChat, {}) == expected;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(equal.load(), 800);
}

// --- the published templates, with expected text written out (the Python test compares many
// more conversations with transformers itself) ---

TEST(ChatTemplatePublished, Qwen25TurnsEndWithImEnd) {
  const RenderedChat chat = fsdpp::data::render_chat(published("qwen2_5.jinja"), kHelloChat, {});
  EXPECT_EQ(chat.text,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi!<|im_end|>\n");
  EXPECT_EQ(span_text(chat, 0), "Hi!<|im_end|>\n");
}

TEST(ChatTemplatePublished, MistralRefusesRolesThatDoNotAlternate) {
  ChatRenderOptions opts;
  opts.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  const auto tmpl = published("mistral_7b_instruct_v0_3.jinja");
  EXPECT_EQ(fsdpp::data::render_chat(tmpl, kHelloChat, opts).text, "<s>[INST] Hello[/INST] Hi!</s>");
  try {
    fsdpp::data::render_conversation(tmpl, Json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"), opts);
    FAIL() << "Mistral's template accepted two user turns in a row";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "[data] chat template: After the optional system message, conversation roles must "
                           "alternate user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplatePublished, Llama31ToolCallAndQwen3Thinking) {
  ChatRenderOptions opts;
  opts.special_tokens = {{"bos_token", "<|begin_of_text|>"}};
  const Json call = Json::parse(R"([{"role": "user", "content": "Weather?"}, {"role": "assistant", "tool_calls":
      [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}])");
  const std::string llama = fsdpp::data::render_conversation(published("llama3_1.jinja"), call, opts);
  EXPECT_NE(llama.find("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
                       "{\"city\": \"Paris\"}}<|eot_id|>"),
            std::string::npos)
      << llama;
  ChatRenderOptions no_thinking;
  no_thinking.extra = {{"enable_thinking", false}};
  no_thinking.add_generation_prompt = true;
  const std::string qwen3 = fsdpp::data::render_conversation(
      published("qwen3.jinja"), Json::parse(R"([{"role": "user", "content": "Hi"}])"), no_thinking);
  EXPECT_EQ(qwen3, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatRender, WhatApplyChatTemplateReadsFromTokenizerConfig) {
  const Json config = Json::parse(R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "special": true},
      "pad_token": null, "model_max_length": 4096,
      "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(fsdpp::data::special_tokens_from_config(config), Json::parse(R"({"bos_token": "<s>", "eos_token": "</s>"})"));
  EXPECT_EQ(fsdpp::data::chat_template_from_config(config, false), "D");
  EXPECT_EQ(fsdpp::data::chat_template_from_config(config, true), "T");
  EXPECT_EQ(fsdpp::data::chat_template_from_config(Json::parse(R"({"chat_template": "S"})"), true), "S");
  EXPECT_THROW(fsdpp::data::chat_template_from_config(Json::parse(R"({"bos_token": "<s>"})"), false), ConfigError);
}
