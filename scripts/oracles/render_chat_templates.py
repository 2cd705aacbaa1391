#!/usr/bin/env python3
"""Usage: scripts/oracles/render_chat_templates.py [--check]

The oracle for tpllama's chat-template renderer (src/chat/). Renders every template in
tests/data/chat/templates/ over the conversations below, with add_generation_prompt false and
true, using Jinja2 set up exactly as Hugging Face transformers' apply_chat_template(tokenize=False)
sets it up, and writes tests/data/chat/renderings.jsonl: one line per (template, conversation,
add_generation_prompt) holding the inputs and the expected text, or the expected error.
It also writes tests/data/chat/chat_options.jsonl: every template over the OPTION_CASES below, the
request options of apply_chat_template beyond add_generation_prompt: continue_final_message (the
rendering cut after the last message, by transformers' own procedure, redone in
continue_final_message() below) and documents.
tests/unit/chat_template_test.cpp renders each line with tpllama and compares byte for byte.

  --check  write nothing; exit 1 when a committed file differs from a fresh one.

Run from anywhere; needs python3 with jinja2 >= 3.1 (Debian: apt-get install python3-jinja2),
not transformers. The environment mirrors transformers' _compile_jinja_template
(src/transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols]), its own `tojson` filter, and the globals
raise_exception and strftime_now; render() gets messages, tools (None unless given), documents
(None), add_generation_prompt, bos_token, eos_token and the conversation's extra variables.
strftime_now reads a fixed clock (FIXED_NOW, UTC) so the fixture does not change with the day.
Any failure other than a rendering error the fixture records stops the script with a traceback.
"""

import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "data" / "chat" / "templates"
OUTPUT = ROOT / "tests" / "data" / "chat" / "renderings.jsonl"
OPTIONS_OUTPUT = ROOT / "tests" / "data" / "chat" / "chat_options.jsonl"
FIXED_NOW = datetime.datetime(2025, 2, 3, 12, 0, 0, tzinfo=datetime.timezone.utc)

# bos_token / eos_token of each checkpoint's tokenizer_config.json.
SPECIAL_TOKENS = {
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("<|begin_of_text|>", "<|im_end|>"),
    # Qwen's bos_token is null: transformers then leaves the variable undefined.
    "Qwen-Qwen2.5-7B-Instruct.jinja": (None, "<|im_end|>"),
    "Qwen-Qwen3-8B.jinja": (None, "<|im_end|>"),
    "TinyLlama-1.1B-Chat-v1.0.jinja": ("<s>", "</s>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "llama-2-chat.jinja": ("<s>", "</s>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Meta-Llama-3-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("<s>", "</s>"),
}


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """What raise_exception throws: transformers raises TemplateError itself; the subclass only
    lets the fixture tell the template's own errors from engine errors."""


def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def system(text):
    return {"role": "system", "content": text}


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def tool_call(name, arguments, call_id=None):
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id  # Mistral's templates want 9 alphanumeric characters
    return call


def reasoning(content, reasoning_content, **fields):
    """An assistant message whose thinking comes apart from its content (Qwen3, vLLM's parsers)."""
    return {"role": "assistant", "content": content, "reasoning_content": reasoning_content, **fields}


WEATHER = {"type": "function", "function": {
    "name": "get_current_weather",
    "description": "Get the current weather in a given location.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and country, e.g. Paris, France"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Température unit (°C or °F)"},
    }, "required": ["location"]},
    "return": {"type": "number", "description": "The temperature"},
}}

SEARCH = {"type": "function", "function": {
    "name": "search_docs",
    "description": "Search the documentation.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "  What to look for  "},
        "limit": {"type": "integer", "description": "Maximum hits", "default": 10},
        "threshold": {"type": "number", "description": "Minimum score", "default": 0.25},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags to match"},
        "weights": {"type": "object", "additionalProperties": {"type": "number"}, "description": "Per-field weights"},
        "mode": {"type": ["string", "integer"], "description": "Mode name or id"},
        "exact": {"type": "boolean", "description": "Exact match only"},
    }, "required": ["query"]},
}}

DATE = "21 Sep 2024"


def conversation(name, messages, **extra):
    return {"name": name, "messages": messages, "extra": extra}


CONVERSATIONS = [
    conversation("single_user", [user("Hello!")]),
    conversation("system_user", [system("You are a helpful assistant."), user("What is 2 + 2?")]),
    conversation("multi_turn", [system("You are terse."), user("Name a colour."), assistant("Blue."),
                                user("Another?")]),
    conversation("multi_turn_no_system", [user("Hi"), assistant("Hello! How can I help?"), user("Tell me a joke."),
                                          assistant("Why did the llama cross the road?"), user("Why?")]),
    conversation("assistant_last", [system("Be brief."), user("Say hi."), assistant("Hi!")]),
    conversation("empty_content", [system(""), user(""), assistant(""), user("")]),
    conversation("unicode", [
        system("Réponds en français. 答えは日本語で。"),
        user("Ünïcödé — 你好，世界! 🦙🚀 Ελληνικά, עברית, русский"),
        assistant("ありがとう 😀"),
        user("Full-width: ＡＢＣ，combining: e\u0301, zero-width:\u200b|"),
    ]),
    conversation("whitespace", [
        system("  \n  padded system  \n"),
        user("\t leading and trailing \n\n"),
        assistant("  answer with spaces  "),
        user("\u3000ideographic space\u00a0and nbsp\u3000\r\n"),
    ]),
    conversation("template_syntax", [
        user("{{ not a tag }} {% if %} {# nope #} \\n backslash \\ 'single' \"double\""),
        assistant("<|eot_id|> <s> </s> [INST] <<SYS>> ``` {%- raw -%}"),
        user("JSON: {\"a\": [1, 2, {\"b\": null}]}\n{}"),
    ]),
    conversation("alternation_error", [user("first"), user("second")]),
    conversation("assistant_first", [assistant("I speak first."), user("ok")]),
    conversation("system_only", [system("Only a system prompt.")]),
    conversation("empty_messages", []),
    conversation("think_tags", [user("2+2?"), assistant("<think>\nLet me add.\n</think>\n\nThe answer is 4."),
                                user("And 3+3?")]),
    conversation("null_content", [user("Call something."), {"role": "assistant", "content": None}, user("Next.")]),
    conversation("content_parts", [user([{"type": "text", "text": "Describe this."},
                                         {"type": "image_url", "image_url": {"url": "http://x/y.png"}}])]),
    conversation("tools_weather", [system("You can call tools."), user("What's the weather in Paris?")],
                 tools=[WEATHER, SEARCH], date_string=DATE),
    conversation("tools_in_system", [user("Look up llamas.")], tools=[SEARCH], tools_in_user_message=False,
                 date_string=DATE),
    conversation("tools_without_user", [system("Tools but no user.")], tools=[WEATHER], date_string=DATE),
    conversation("tool_call_roundtrip", [
        user("What's the weather in Paris?"),
        {"role": "assistant", "tool_calls": [tool_call("get_current_weather",
                                                       {"location": "Paris, France", "unit": "celsius"})]},
        {"role": "tool", "name": "get_current_weather", "content": "22.5"},
        assistant("It is 22.5 °C in Paris."),
    ], tools=[WEATHER], date_string=DATE),
    conversation("tool_call_string_arguments", [
        user("Search twice."),
        {"role": "assistant", "content": None, "tool_calls": [
            tool_call("search_docs", "{\"query\": \"llama\"}"),
            tool_call("search_docs", "{\"query\": \"alpaca\", \"limit\": 2}"),
        ]},
        {"role": "tool", "content": "result one"},
        {"role": "tool", "content": "result two"},
        assistant("Found both."),
    ], tools=[SEARCH]),
    conversation("tool_call_numbers", [
        user("Compute."),
        {"role": "assistant", "tool_calls": [tool_call("search_docs", {
            "count": 3, "ratio": 0.1, "big": 1e16, "tiny": 1.5e-7, "neg": -2.0, "whole": 100.0,
            "flag": True, "nothing": None, "nested": {"list": [1, 2.5, "x"], "empty": {}, "empty_list": []},
            "text": "é\n\"quoted\" \\ \t\u0001"})]},
        {"role": "tool", "content": {"hits": [{"id": 1, "score": 0.75}], "total": 1}},
    ], tools=[SEARCH], date_string=DATE),
    conversation("builtin_tools", [
        system("Use search when needed."),
        user("Search for the weather."),
        {"role": "assistant", "tool_calls": [tool_call("brave_search", {"query": "weather Paris"})]},
        {"role": "ipython", "content": "sunny"},
    ], builtin_tools=["brave_search", "wolfram_alpha", "code_interpreter"], date_string=DATE),
    # Qwen3's enable_thinking (a chat_template_kwargs variable): false prefills an empty <think>.
    conversation("thinking_disabled", [user("Hi, quickly: 2+2?")], enable_thinking=False),
    conversation("thinking_enabled", [system("Think step by step."), user("Is 91 prime?")], enable_thinking=True),
    # reasoning_content beside content: dropped before the last user turn, kept after it.
    conversation("reasoning_history", [
        user("2+2?"), reasoning("The answer is 4.", "Two plus two.\nThat is four."), user("And 3+3?"),
    ]),
    conversation("reasoning_last", [
        system("Be exact."), user("Is 7 odd?"), reasoning("\nYes.", "\n7 = 2*3 + 1.\n"),
    ], enable_thinking=True),
    # A multi-step tool turn: reasoning and content with the call, two results in a row, a final
    # answer whose thinking is inside its content.
    conversation("tool_turn_with_reasoning", [
        system("You can call tools."),
        user("Weather and forecast for Paris?"),
        reasoning("Let me check.", "I need the weather tool.", tool_calls=[
            tool_call("get_current_weather", {"location": "Paris, France", "unit": "celsius"}),
            tool_call("search_docs", "{\"query\": \"forecast Paris\"}")]),
        {"role": "tool", "name": "get_current_weather", "content": "22.5"},
        {"role": "tool", "name": "search_docs", "content": "Sunny all week."},
        assistant("<think>\nBoth results are in.\n</think>\n\nIt is 22.5 °C and sunny all week."),
        user("Thanks! Tomorrow?"),
    ], tools=[WEATHER, SEARCH], enable_thinking=False),
    # Tool calls with ids and results that name them (Mistral's [TOOL_CALLS] / [TOOL_RESULTS]).
    conversation("tool_call_ids", [
        system("Use the tools."),
        user("What's the weather in Paris?"),
        {"role": "assistant", "content": None, "tool_calls": [
            tool_call("get_current_weather", {"location": "Paris, France", "unit": "celsius"}, "call0Ab12")]},
        {"role": "tool", "tool_call_id": "call0Ab12", "name": "get_current_weather", "content": "22.5"},
        assistant("It is 22.5 °C in Paris."),
        user("And in Köln?"),
    ], tools=[WEATHER]),
    conversation("tool_call_ids_structured_result", [
        user("Search for llamas."),
        {"role": "assistant", "tool_calls": [tool_call("search_docs", {"query": "llamas", "limit": 2}, "Zz9yX8wV7"),
                                             tool_call("search_docs", {"query": "alpacas"}, "abcdefghi")]},
        {"role": "tool", "tool_call_id": "Zz9yX8wV7", "content": {"content": "Llamas hum."}},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "Alpacas are smaller."},
    ], tools=[SEARCH]),
    conversation("tool_call_bad_id", [
        user("Weather?"),
        {"role": "assistant", "tool_calls": [tool_call("get_current_weather", {"location": "Oslo"}, "short")]},
        {"role": "tool", "tool_call_id": "short", "content": "-3"},
    ], tools=[WEATHER]),
    conversation("system_mid_conversation", [user("Hi"), assistant("Hello."), system("Answer in French now."),
                                             user("How are you?")]),
]


LLAMA_DOCS = [
    {"title": "Llamas", "text": "Llamas are camelids from South America."},
    {"title": "Alpacas", "text": "Alpacas are smaller than llamas.", "source": "notes.txt"},
]


def option_case(conv, continue_final_message=False, add_generation_prompt=False, documents=None):
    return {"conversation": conv, "continue_final_message": continue_final_message,
            "add_generation_prompt": add_generation_prompt, "documents": documents}


# apply_chat_template's other options. continue_final_message always with add_generation_prompt
# false (transformers refuses both); each final message tests one way of finding its content.
OPTION_CASES = [
    option_case(conversation("prefill", [system("You are a poet."), user("Write a haiku about llamas."),
                                         assistant("Soft wool on the hills,")]), True),
    option_case(conversation("prefill_no_system", [user("Count to five."), assistant("One, two, three,")]), True),
    option_case(conversation("prefill_multi_turn", [user("Hi"), assistant("Hello!"), user("Tell me a joke."),
                                                    assistant("Why did the llama")]), True),
    # Trailing whitespace: kept by templates that print the content as is, trimmed by others.
    option_case(conversation("prefill_trailing_space", [user("Finish it."), assistant("The answer is ")]), True),
    # Leading whitespace and Unicode spaces (Python's str.strip() takes both).
    option_case(conversation("prefill_whitespace", [user("Indent it."), assistant("\n  indented\u00a0\u3000")]),
                True),
    # The content also occurs earlier in the conversation: the last occurrence is the message's.
    option_case(conversation("prefill_repeated", [user("Say yes."), assistant("yes")]), True),
    option_case(conversation("prefill_unicode", [user("日本語で答えて。"), assistant("はい、🦙 ")]), True),
    # Empty content is found at the very end: transformers keeps the whole rendering.
    option_case(conversation("prefill_empty", [user("Hi"), assistant("")]), True),
    # A template that drops the reasoning from an assistant message (DeepSeek-R1) cannot continue it.
    option_case(conversation("prefill_think", [user("2+2?"),
                                               assistant("<think>\nAdding.\n</think>\n\nThe answer")]), True),
    option_case(conversation("prefill_tools", [user("What's the weather in Paris?"), assistant("Let me check")],
                             tools=[WEATHER], date_string=DATE), True),
    # documents reach every template (transformers passes them); those without a use ignore them.
    option_case(conversation("documents", [user("What do the documents say?")]), add_generation_prompt=True,
                documents=LLAMA_DOCS),
    option_case(conversation("documents_prefill", [user("What do the documents say?"), assistant("They say")]),
                True, documents=LLAMA_DOCS),
]


def render(env, template_text, tokens, conv, add_generation_prompt, documents=None):
    bos, eos = tokens
    extra = dict(conv["extra"])
    tools = extra.pop("tools", None)
    # As transformers' special_tokens_map: a token the checkpoint does not set is not passed at all.
    special = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
    template = env.from_string(template_text)
    return template.render(messages=conv["messages"], tools=tools, documents=documents,
                           add_generation_prompt=add_generation_prompt, **special, **extra)


def continue_final_message(rendered, messages):
    """transformers' render_jinja_template with continue_final_message=True, after rendering: the
    text cut after the final message's content (its last occurrence, stripped)."""
    final = messages[-1]["content"]
    if final.strip() not in rendered:
        raise ValueError("continue_final_message is set but the final message does not appear in the chat after "
                         "applying the chat template!")
    at = rendered.rindex(final.strip())
    if rendered[at:at + len(final.lstrip())] == final:
        return rendered[:at + len(final.lstrip())]
    return rendered[:at + len(final.strip())]


def template_names():
    names = sorted(p.name for p in TEMPLATES.glob("*.jinja"))
    missing = [n for n in names if n not in SPECIAL_TOKENS]
    if missing or not names:
        sys.exit(f"no bos/eos tokens listed for {missing} (or no templates in {TEMPLATES})")
    return names


def expect(record, produce):
    """record["expected"] = produce(), or record["error"] as the fixture records a failure."""
    try:
        record["expected"] = produce()
    except RaisedByTemplate as e:
        record["error"] = {"raised_by_template": True, "type": "TemplateError", "message": str(e)}
    except (jinja2.exceptions.TemplateError, TypeError, ValueError) as e:
        record["error"] = {"raised_by_template": False, "type": type(e).__name__, "message": str(e)}
    return record


def records():
    env = environment()
    for name in template_names():
        text = (TEMPLATES / name).read_text(encoding="utf-8")
        for conv in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                record = {
                    "template": name, "conversation": conv["name"], "add_generation_prompt": add_generation_prompt,
                    "bos_token": SPECIAL_TOKENS[name][0], "eos_token": SPECIAL_TOKENS[name][1],
                    "clock": int(FIXED_NOW.timestamp()), "messages": conv["messages"], "extra": conv["extra"],
                }
                yield expect(record, lambda: render(env, text, SPECIAL_TOKENS[name], conv, add_generation_prompt))


def option_records():
    env = environment()
    for name in template_names():
        text = (TEMPLATES / name).read_text(encoding="utf-8")
        for case in OPTION_CASES:
            conv = case["conversation"]
            record = {
                "template": name, "conversation": conv["name"], "add_generation_prompt": case["add_generation_prompt"],
                "continue_final_message": case["continue_final_message"], "documents": case["documents"],
                "bos_token": SPECIAL_TOKENS[name][0], "eos_token": SPECIAL_TOKENS[name][1],
                "clock": int(FIXED_NOW.timestamp()), "messages": conv["messages"], "extra": conv["extra"],
            }

            def produce():
                rendered = render(env, text, SPECIAL_TOKENS[name], conv, case["add_generation_prompt"],
                                  case["documents"])
                return continue_final_message(rendered, conv["messages"]) if case["continue_final_message"] \
                    else rendered
            yield expect(record, produce)


def main():
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] != "--check"):
        sys.exit(__doc__)
    outputs = [(OUTPUT, records()), (OPTIONS_OUTPUT, option_records())]
    stale = False
    for path, lines in outputs:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
        if len(sys.argv) == 2:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{path} differs from a fresh rendering (jinja2 {jinja2.__version__}); rerun without --check",
                      file=sys.stderr)
                stale = True
            else:
                print(f"{path}: up to date")
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {text.count(chr(10))} renderings to {path} (jinja2 {jinja2.__version__})")
    if stale:
        sys.exit(1)


if __name__ == "__main__":
    main()
