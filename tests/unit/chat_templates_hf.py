#!/usr/bin/env python3
"""fsdpp's chat templates against transformers' own renderer, byte for byte.

    chat_templates_hf.py FSDPP_CHAT_TEMPLATE_TOOL TEMPLATE_DIR

For the published templates of Qwen2.5, Qwen3, Llama 3.1, Llama 3.2, Mistral 7B Instruct v0.3
and TRL's generation-tagged Qwen2.5 and Qwen3 (tests/data/chat_templates/), over conversations
with and without a system message, several turns, tools and tool calls, reasoning, unicode,
None-valued keys and add_generation_prompt both ways:

- the text: transformers' PreTrainedTokenizer.apply_chat_template(tokenize=False) against
  fsdpp::data::render_conversation; when transformers raises, fsdpp must refuse too, and a
  template's raise_exception(msg) must reach the user as "[data] chat template: msg";
- the assistant spans of templates with {% generation %}: transformers' own generation indices
  (render_jinja_template(return_assistant_tokens_mask=True), in characters, turned into bytes)
  against fsdpp::data::render_chat's;
- the spans of templates without: the prefix rule computed here from transformers' renders
  (render(messages[:i], add_generation_prompt=True) a prefix of render(messages[:i+1]), itself a
  prefix of the whole) against fsdpp's, and fsdpp refusing exactly where the rule fails
  (Qwen3 rewriting earlier thinking turns, Mistral moving the system message);
- Qwen2.5's prefix spans against the generation spans of its tagged variant, which renders the
  same text: the two ways of finding a turn agree (the tagged span starts one byte earlier, at
  the "\\n" after "<|im_start|>assistant");
- TRL's conversational prompt/completion: the prompt rendered with add_generation_prompt=True,
  then prompt + completion; the completion's span.

strftime_now (Llama 3.2) reads a fixed clock on both sides. Prints one line per template and
exits 1 on the first differences (all of them listed).
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile

import transformers.utils.chat_template_utils as ctu
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

FIXED_NOW = 1_753_000_000  # 2025-07-20, strftime_now's "now" on both sides


class FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime.fromtimestamp(FIXED_NOW, tz)


# transformers' strftime_now reads the module's `datetime` when called.
ctu.datetime = FixedDatetime

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city — «quoted» and unicode: 東京",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
        "return": {"type": "string"},
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}

SYSTEM = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}


def call(name, arguments, call_id="call12345"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = {
    "one_turn": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}],
    "system_multi_turn": [
        SYSTEM,
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6"},
    ],
    "prompt_only": [SYSTEM, {"role": "user", "content": "Tell me a joke."}],
    "unicode_whitespace": [
        {"role": "user", "content": "  Größe? 日本語 🤖\u00a0naïve \"q\" \\ back\\slash\ttab  "},
        {"role": "assistant", "content": "\n Antwort: ✓ — “curly” 👩‍👩‍👧 \u200b\n\n"},
    ],
    "tool_call": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius", "days": 2, "ratio": 0.5, "exact": True, "note": None, "tags": ["a", "é"]})]},
        {"role": "tool", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}", "tool_call_id": "call12345"},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
    ],
    "two_tool_results": [
        SYSTEM,
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Oslo"}, "call67890")]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call12345"},
        {"role": "tool", "content": "rain", "tool_call_id": "call67890"},
        {"role": "assistant", "content": "Paris: sunny. Oslo: rain."},
    ],
    "reasoning": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No: 7 × 13."},
    ],
    "reasoning_earlier_turn": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No."},
        {"role": "user", "content": "And 97?"},
        {"role": "assistant", "content": "<think>\nCheck 2,3,5,7.\n</think>\n\nYes."},
    ],
    "none_valued_keys": [
        {"role": "user", "content": "Hi", "name": None},
        {"role": "assistant", "content": "Hello!", "tool_calls": None, "reasoning_content": None},
    ],
    "content_blocks": [  # content as a list: Python's repr where a template prints it, an error where it adds
        {"role": "user", "content": [{"type": "text", "text": "Describe it, 'briefly'."}]},
        {"role": "assistant", "content": "A cat."},
    ],
    "tool_result_object": [  # a tool's content as an object: tojson, Python's dict repr, or .content
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Oslo"})]},
        {"role": "tool", "content": {"content": "rain", "mm": 3.0, "ok": True, "none": None}, "tool_call_id": "call12345"},
        {"role": "assistant", "content": "Rain."},
    ],
    "roles_do_not_alternate": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "three"},
    ],
}

# Per template: its special tokens and the conversations and keyword arguments it is tried with
# (every conversation is tried; these add variants).
TEMPLATES = {
    "qwen2_5.jinja": {"tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, "kwargs": [{}]},
    "qwen2_5_training.jinja": {"tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, "kwargs": [{}]},
    "qwen3.jinja": {"tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
                    "kwargs": [{}, {"enable_thinking": False}, {"enable_thinking": True}]},
    "qwen3_training.jinja": {"tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
                             "kwargs": [{}, {"enable_thinking": False}]},
    "llama3_1.jinja": {"tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                       "kwargs": [{}, {"tools_in_user_message": False, "date_string": "01 Jan 2025"},
                                  {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}]},
    "llama3_2.jinja": {"tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                       "kwargs": [{}, {"tools_in_user_message": False}]},
    "mistral_7b_instruct_v0_3.jinja": {"tokens": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
                                       "kwargs": [{}]},
}
TOOLS_FOR = {"tool_call": [WEATHER_TOOL], "two_tool_results": [WEATHER_TOOL, SEARCH_TOOL], "tool_result_object": [WEATHER_TOOL]}
BUILTIN_CALL = [  # Llama 3.1's builtin tools: <|python_tag|>name.call(...)
    {"role": "user", "content": "Search the news."},
    {"role": "assistant", "content": "", "tool_calls": [call("brave_search", {"query": "news today"})]},
    {"role": "tool", "content": "Nothing happened."},
    {"role": "assistant", "content": "Nothing happened."},
]
PROMPT_COMPLETION = [
    ([{"role": "user", "content": "Name a colour."}], [{"role": "assistant", "content": "Blue."}]),
    ([SYSTEM, {"role": "user", "content": "2+2?"}], [{"role": "assistant", "content": " 4 "}]),
]


def make_tokenizer(template, tokens):
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")), **tokens)
    tok.chat_template = template
    return tok


def byte_span(text, begin, end):
    return [len(text[:begin].encode()), len(text[:end].encode())]


def expected_prefix_spans(render, messages, full):
    """The prefix rule, over transformers' renders; None when some turn cannot be found."""
    spans = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        try:
            prompt = render(messages[:i], True)
            turn = render(messages[: i + 1], False)
        except Exception:  # noqa: BLE001 - the template refuses the shorter conversation
            return None
        if not turn.startswith(prompt) or not full.startswith(turn):
            return None
        spans.append(byte_span(full, len(prompt), len(turn)))
    return spans


def build_cases(template_dir):
    cases, expected = [], []
    for name, spec in TEMPLATES.items():
        path = os.path.join(template_dir, name)
        template = open(path, encoding="utf-8").read()
        tok = make_tokenizer(template, spec["tokens"])
        special = tok.special_tokens_map
        tagged = "{% generation %}" in template or "{%- generation %}" in template
        conversations = dict(CONVERSATIONS)
        if name == "llama3_1.jinja":
            conversations["builtin_call"] = BUILTIN_CALL
        for conv_name, messages in conversations.items():
            tools = TOOLS_FOR.get(conv_name)
            for kwargs in spec["kwargs"]:
                for gen in (False, True):
                    def render(msgs, add_gen, kwargs=kwargs, tools=tools):
                        if not msgs:
                            raise ValueError("empty conversation")
                        return tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=add_gen,
                                                       tokenize=False, **kwargs)

                    exp = {"template": name, "conversation": conv_name, "kwargs": kwargs, "gen": gen}
                    try:
                        exp["text"] = render(messages, gen)
                    except Exception as e:  # noqa: BLE001
                        exp["error"] = e
                    if "text" in exp:
                        if tagged:
                            kept = [{k: v for k, v in m.items() if v is not None} for m in messages]
                            texts, indices = ctu.render_jinja_template(
                                conversations=[kept], tools=tools, chat_template=template,
                                return_assistant_tokens_mask=True, add_generation_prompt=gen,
                                **{**special, **kwargs})
                            assert texts[0] == exp["text"]
                            exp["spans"] = [byte_span(texts[0], b, e) for b, e in indices[0]]
                        else:
                            exp["spans"] = expected_prefix_spans(render, messages, exp["text"])
                    cases.append({"template": path, "messages": messages, "tools": tools, "special_tokens": special,
                                  "extra": kwargs, "add_generation_prompt": gen, "now": FIXED_NOW})
                    expected.append(exp)
        for prompt, completion in PROMPT_COMPLETION:
            render = lambda msgs, add_gen: tok.apply_chat_template(msgs, add_generation_prompt=add_gen, tokenize=False)
            prompt_text, full = render(prompt, True), render(prompt + completion, False)
            exp = {"template": name, "conversation": "prompt/completion", "kwargs": {}, "gen": False, "text": full,
                   "spans": [byte_span(full, len(prompt_text), len(full))] if full.startswith(prompt_text) else None}
            cases.append({"template": path, "kind": "prompt_completion", "prompt": prompt, "completion": completion,
                          "special_tokens": special, "now": FIXED_NOW})
            expected.append(exp)
    return cases, expected


def compare(exp, got):
    """The differences between transformers' result and fsdpp's, as lines (none when equal)."""
    problems = []
    if "error" in exp:
        if "text_error" not in got:
            problems.append(f"transformers raised {type(exp['error']).__name__}: {exp['error']}; fsdpp rendered "
                            f"{got.get('text', '')[:200]!r}")
        elif type(exp["error"]).__name__ == "TemplateError" and got["text_error"] != f"[data] chat template: {exp['error']}":
            problems.append(f"raise_exception's message: transformers {str(exp['error'])!r}, fsdpp {got['text_error']!r}")
        return problems
    if got.get("text") != exp["text"]:
        a, b = exp["text"], got.get("text", got.get("text_error", ""))
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        problems.append(f"text differs at character {at}: transformers {a[max(0, at - 40):at + 40]!r}, "
                        f"fsdpp {b[max(0, at - 40):at + 40]!r}")
        return problems
    if exp["spans"] is None:
        if "spans_error" not in got:
            problems.append(f"transformers' renders find no assistant turns by prefixes, fsdpp found {got['spans']}")
        elif "cannot find assistant message" not in got["spans_error"] and "is not a prefix" not in got["spans_error"]:
            problems.append(f"fsdpp's refusal does not say which turn: {got['spans_error']}")
    elif got.get("spans") != exp["spans"]:
        problems.append(f"assistant spans: transformers {exp['spans']}, fsdpp {got.get('spans', got.get('spans_error'))}")
    return problems


def main():
    tool, template_dir = sys.argv[1], sys.argv[2]
    cases, expected = build_cases(template_dir)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cases.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)
        run = subprocess.run([tool, path], capture_output=True, text=True, encoding="utf-8")
    if run.returncode != 0:
        print(run.stdout[-2000:], run.stderr[-2000:])
        sys.exit(f"{tool} failed with exit code {run.returncode}")
    results = json.loads(run.stdout)
    assert len(results) == len(expected)

    failures, per_template = [], {}
    for exp, got in zip(expected, results):
        stats = per_template.setdefault(exp["template"], {"cases": 0, "errors": 0, "spans": 0, "refused": 0})
        stats["cases"] += 1
        stats["errors"] += "error" in exp
        stats["spans"] += len(exp.get("spans") or [])
        stats["refused"] += "text" in exp and exp.get("spans") is None
        for p in compare(exp, got):
            failures.append(f"{exp['template']} / {exp['conversation']} / {exp['kwargs']} / "
                            f"add_generation_prompt={exp['gen']}: {p}")

    # The two ways of finding a Qwen2.5 turn agree: the tagged template's span starts at the "\n"
    # after "<|im_start|>assistant", the prefix rule's just after it.
    by_key = {}
    for exp, got in zip(expected, results):
        by_key[(exp["template"], exp["conversation"], json.dumps(exp["kwargs"]), exp["gen"])] = got
    agreeing = 0
    for (tname, conv, kw, gen), got in by_key.items():
        if tname != "qwen2_5.jinja" or conv == "prompt/completion" or "spans" not in got:
            continue
        tagged = by_key.get(("qwen2_5_training.jinja", conv, kw, gen))
        if not tagged or tagged.get("text") != got.get("text"):
            continue
        shifted = [[b + 1, e] for b, e in tagged.get("spans", [])]
        if shifted != got["spans"]:
            failures.append(f"qwen2_5 / {conv}: prefix spans {got['spans']} but the tagged template's are {tagged.get('spans')}")
        agreeing += 1

    for name, s in per_template.items():
        print(f"{name}: {s['cases']} cases ({s['errors']} refused by the template), {s['spans']} assistant spans, "
              f"{s['refused']} conversations whose turns cannot be found by prefixes")
    print(f"qwen2_5 prefix spans equal to qwen2_5_training's generation spans in {agreeing} conversations")
    if failures:
        print(f"{len(failures)} differences:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print(f"all {len(expected)} cases equal to transformers {__import__('transformers').__version__}")


if __name__ == "__main__":
    main()
