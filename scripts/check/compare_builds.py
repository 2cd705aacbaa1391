#!/usr/bin/env python3
"""Usage: scripts/check/compare_builds.py OLD_BUILD NEW_BUILD [--work DIR] [--keep]
                                         [--skip-field NAME ...]

Shows that a change left behaviour alone: runs the tpllama of two build directories (each with
its converted stories260K, as scripts/setup.sh makes it) over the same workloads and compares what
they write, byte for byte, with timings masked:

  - the records of `run`: one rank; tp 2; pp 2 with int8 weights; n > 1 samples, penalties,
    logit_bias, logprobs, echo, prompt_logprobs, stop strings and ids, scoring requests; structured
    outputs (schemas, regexes, choices, a grammar, --response-format); chats (OpenAI batch and
    JSONL, with a template); --ordered with preemption (a small KV cache); and a corpus of several
    hundred request lines, each giving one field a valid, neutral, null, wrong or unknown value,
    in every format and kind of request (their error records quote the field and the value);
  - every --stats key and every value that is not a time or a rate;
  - `tokenize` over the same inputs, `plan` (text and --json), `perplexity` (--output and
    --windows), and `bench --json` (generating, with a shared prefix, scoring continuations).

--skip-field NAME leaves the corpus lines that give field NAME out: a field whose behaviour the
change under test adds or mends on purpose (say so where the change is described).

Exits 1 and prints the first differences when any output differs; prints what was compared when
none does. Needs mpirun (2 ranks, --oversubscribe) and the stories260K model in each build.
"""

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Times, rates and memory; and masks_walked, which thread timing decides (a walk that starts after
# a parallel one of the same grammar state finished finds its mask memoized).
TIMING = re.compile(r"(seconds|per_second|bubble|_ms$|^ms_|time|rate_gbps|gflops|bandwidth|rss|"
                    r"memory|elapsed|throughput|tok_s|percent_of|masks_walked)")


def mask(value, timing=False):
    """The JSON value with every time, rate and memory figure (a number under a key that names
    one, at any depth) replaced by a marker."""
    if isinstance(value, dict):
        return {k: mask(v, timing or bool(TIMING.search(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, timing) for v in value]
    if timing and isinstance(value, (int, float)) and not isinstance(value, bool):
        return "<timing>"
    return value


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def field_values():
    """Values to give every field: valid, neutral, null, wrong type, out of range."""
    return [None, True, False, 0, 1, 2, -1, 0.5, 1.5, 100, "x", "", [], [1, 2], ["a"], {},
            {"5": 10}, {"type": "text"}, 2**40, -2.5]


FIELDS = [
    # read by some kinds and formats
    "max_tokens", "max_completion_tokens", "temperature", "top_k", "top_p", "min_p", "seed",
    "stop", "logprobs", "top_logprobs", "ignore_eos", "echo", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "logit_bias", "min_tokens", "stop_token_ids",
    "include_stop_str_in_output", "skip_special_tokens", "return_tokens_as_token_ids",
    "spaces_between_special_tokens", "n", "prompt_logprobs", "response_format",
    "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "tools", "chat_template_kwargs", "documents", "add_generation_prompt",
    "continue_final_message",
    # taken at their neutral values, or refused
    "model", "user", "metadata", "store", "service_tier", "stream", "stream_options",
    "parallel_tool_calls", "request_id", "safety_identifier", "prompt_cache_key", "cache_salt",
    "guided_decoding_backend", "length_penalty", "best_of", "use_beam_search", "bad_words",
    "priority", "modalities", "tool_choice", "function_call", "add_special_tokens", "suffix",
    "functions", "truncate_prompt_tokens", "allowed_token_ids", "logits_processors",
    "guided_whitespace_pattern", "chat_template", "mm_processor_kwargs", "reasoning_effort",
    "verbosity", "audio", "prediction", "web_search_options",
    # unknown
    "no_such_field", "Temperature",
]


def field_corpus(skip=()):
    """Request lines (JSONL and OpenAI batch), one field varied at a time (but those of `skip`)."""
    jsonl, batch = [], []
    kinds = {
        "prompt": {"prompt": "Once upon a time", "max_tokens": 2},
        "scoring": {"context": "Once upon a time", "continuation": " there was"},
        "chat": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    }
    n = 0
    for field in FIELDS:
        if field in skip:
            continue
        for value in field_values():
            for kind, base in kinds.items():
                line = dict(base)
                if field in line and value is None:
                    continue
                line[field] = value
                n += 1
                jsonl.append(dict(line, id=f"j{n}"))
                if kind == "scoring":
                    continue
                url = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
                batch.append({"custom_id": f"b{n}", "method": "POST", "url": url, "body": line})
    # Lines that are no request, and pairs of fields that refer to each other.
    jsonl += ["not json", "[1,2]", '{"prompt": 5}', '{"id": [1], "prompt": "a"}',
              {"prompt": "a", "max_tokens": 1, "min_tokens": 3},
              {"prompt": "a", "max_tokens": 2, "max_completion_tokens": 3},
              {"messages": [{"role": "user", "content": "a"}], "logprobs": True, "top_logprobs": 2},
              {"prompt": "a", "context": "b", "continuation": "c"},
              {"messages": [{"role": "assistant", "content": "a"}], "continue_final_message": True,
               "add_generation_prompt": False, "max_tokens": 2},
              {"messages": [{"role": "assistant", "content": "a"}], "continue_final_message": True},
              {"prompt": "a", "guided_regex": "a+", "guided_choice": ["a"]},
              {"prompt": [1, 2, 3], "max_tokens": 2}, {"prompt": [], "max_tokens": 2},
              {"prompt": [100000], "max_tokens": 2}]
    batch += ['{"custom_id": "e1"}', {"custom_id": "e2", "method": "GET", "url": "/v1/completions",
                                      "body": {"prompt": "a"}},
              {"custom_id": "e3", "url": "/v1/embeddings", "body": {"input": "a"}},
              {"custom_id": "e4", "url": "/v1/completions", "body": {"prompt": ["a"],
                                                                      "max_tokens": 2}},
              {"custom_id": "e5", "url": "/v1/completions", "body": {"prompt": [[1, 5, 6]],
                                                                      "max_tokens": 2}},
              {"custom_id": "e6", "url": "/v1/completions", "body": {"prompt": "a"}, "extra": 1}]
    return jsonl, batch


def sampling_requests():
    """Generation and scoring requests that exercise the output side."""
    out = []
    prompts = ["Once upon a time", "The little dog", "Lily and Tom went to the park.",
               "One day, a big bear", "She saw a bird"]
    for i, p in enumerate(prompts):
        out.append({"id": f"g{i}", "prompt": p, "max_tokens": 24})
        out.append({"id": f"s{i}", "prompt": p, "max_tokens": 20, "temperature": 0.9, "top_p": 0.9,
                    "seed": i, "n": 3, "logprobs": 2})
        out.append({"id": f"p{i}", "prompt": p, "max_tokens": 20, "temperature": 0.7,
                    "presence_penalty": 0.5, "frequency_penalty": 0.3,
                    "repetition_penalty": 1.3, "logit_bias": {"13": 5, "300": -100},
                    "min_tokens": 5, "stop": [".", " the"], "include_stop_str_in_output": i % 2 == 0})
        out.append({"id": f"e{i}", "prompt": p, "max_tokens": 8, "echo": True, "logprobs": 3,
                    "prompt_logprobs": 2})
        out.append({"id": f"t{i}", "prompt": p, "max_tokens": 12, "stop_token_ids": [13, 29],
                    "skip_special_tokens": False, "return_tokens_as_token_ids": True,
                    "logprobs": 1, "ignore_eos": True})
        out.append({"id": f"c{i}", "context": p, "continuation": " there was a girl",
                    "logprobs": True})
    return out


def structured_requests():
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "brave": {"type": "boolean"}},
              "required": ["name", "brave"]}
    out = []
    for i in range(6):
        out.append({"id": f"j{i}", "prompt": "Once upon a time", "max_tokens": 48,
                    "temperature": 1.0, "seed": i,
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "h", "schema": schema}}})
        out.append({"id": f"r{i}", "prompt": "The cat", "max_tokens": 16, "temperature": 1.0,
                    "seed": i, "guided_regex": "(yes|no), [a-z]{2,6}\\."})
        out.append({"id": f"c{i}", "prompt": "The dog", "max_tokens": 8, "temperature": 1.0,
                    "seed": i, "n": 2, "guided_choice": ["happy", "sad", "big dog"]})
        out.append({"id": f"g{i}", "prompt": "A bird", "max_tokens": 24, "temperature": 1.0,
                    "seed": i, "guided_grammar": 'root ::= "a" [b-d]+ " end"'})
        out.append({"id": f"o{i}", "prompt": "Tom said", "max_tokens": 32, "temperature": 1.0,
                    "seed": i, "response_format": {"type": "json_object"}})
    return out


def chat_requests():
    batch, jsonl = [], []
    for i in range(4):
        messages = [{"role": "system", "content": "Tell a story."},
                    {"role": "user", "content": f"About a cat number {i}"}]
        batch.append({"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "m", "messages": messages, "max_tokens": 16,
                               "logprobs": True, "top_logprobs": 2}})
        batch.append({"custom_id": f"k{i}", "method": "POST", "url": "/v1/completions",
                      "body": {"prompt": "Once upon", "max_tokens": 8, "echo": True,
                               "logprobs": 1}})
        jsonl.append({"id": i, "messages": messages, "max_tokens": 12, "temperature": 0.5,
                      "seed": i, "n": 2})
    return batch, jsonl


class Runner:
    def __init__(self, build, work, name):
        self.build = os.path.abspath(build)
        self.bin = os.path.join(self.build, "tpllama")
        self.model = os.path.join(self.build, "stories260K")
        self.work = os.path.join(work, name)
        os.makedirs(self.work, exist_ok=True)
        for need in (self.bin, os.path.join(self.model, "config.json")):
            if not os.path.exists(need):
                sys.exit(f"{need} is missing: build {build} with scripts/setup.sh first")

    def run(self, name, args, ranks=1, check=True):
        """Runs one command; returns (exit status, stdout)."""
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", self.bin] + args if ranks else \
            [self.bin] + args
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        p = subprocess.run(cmd, cwd=self.work, env=env, capture_output=True, text=True)
        with open(os.path.join(self.work, name + ".log"), "w") as f:
            f.write(p.stdout + p.stderr)
        if check and p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
        return p.returncode, p.stdout

    def job(self, name, inp, extra=(), ranks=1):
        out = os.path.join(self.work, name + ".jsonl")
        stats = os.path.join(self.work, name + ".stats.json")
        self.run(name, ["run", "--model", self.model, "--input", inp, "--output", out,
                        "--overwrite", "--stats", stats, "--threads", "1"] + list(extra), ranks)
        return out, stats


def compare_files(kind, old_path, new_path, diffs, json_lines=False, json_whole=False):
    with open(old_path, encoding="utf-8") as f:
        old = f.read()
    with open(new_path, encoding="utf-8") as f:
        new = f.read()
    if json_whole:
        old = json.dumps(mask(json.loads(old)), indent=1, sort_keys=True)
        new = json.dumps(mask(json.loads(new)), indent=1, sort_keys=True)
    if json_lines:  # OpenAI batch records hold a creation time
        old = re.sub(r'"created":\d+', '"created":0', old)
        new = re.sub(r'"created":\d+', '"created":0', new)
    if old != new:
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "old", "new", lineterm="",
                                    n=0)
        diffs.append(f"== {kind}: {old_path} and {new_path} differ\n" + "\n".join(list(diff)[:30]))
    return old.count("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--work", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--skip-field", action="append", default=[],
                    help="leave out the corpus lines that give this field")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="tpllama_compare_")
    os.makedirs(work, exist_ok=True)
    inputs = os.path.join(work, "inputs")
    os.makedirs(inputs, exist_ok=True)

    fields_jsonl, fields_batch = field_corpus(set(a.skip_field))
    chat_batch, chat_jsonl = chat_requests()
    files = {
        "fields.jsonl": fields_jsonl, "fields_batch.jsonl": fields_batch,
        "sampling.jsonl": sampling_requests(), "structured.jsonl": structured_requests(),
        "chat_batch.jsonl": chat_batch, "chat.jsonl": chat_jsonl,
    }
    for name, lines in files.items():
        write_lines(os.path.join(inputs, name), lines)
    inp = {name: os.path.join(inputs, name) for name in files}
    demo = os.path.join(REPO, "models/demo/prompts.txt")
    corpus = os.path.join(REPO, "models/demo/corpus.txt")
    template = os.path.join(REPO, "tests/data/chat/templates/TinyLlama-1.1B-Chat-v1.0.jinja")
    hero = os.path.join(inputs, "hero.json")
    with open(hero, "w") as f:
        json.dump({"type": "json_schema", "json_schema": {"name": "hero", "schema": {
            "type": "object", "properties": {"name": {"type": "string", "maxLength": 20}},
            "required": ["name"]}}}, f)

    jobs = [  # name, input, flags, ranks
        ("demo", demo, ["--max-tokens", "64"], 1),
        ("fields", inp["fields.jsonl"], ["--chat-template", template], 1),
        ("fields_batch", inp["fields_batch.jsonl"], ["--chat-template", template], 1),
        ("sampling", inp["sampling.jsonl"], [], 1),
        ("sampling_tp2", inp["sampling.jsonl"], ["--tp", "2"], 2),
        ("sampling_pp2_int8", inp["sampling.jsonl"], ["--pp", "2", "--dtype", "int8"], 2),
        ("structured", inp["structured.jsonl"], [], 1),
        ("structured_default", demo, ["--response-format", hero, "--temperature", "1",
                                      "--max-tokens", "40"], 1),
        ("chat_batch", inp["chat_batch.jsonl"], ["--chat-template", template], 1),
        ("chat", inp["chat.jsonl"], ["--chat-template", template], 1),
        ("preempted_ordered", inp["sampling.jsonl"],
         ["--ordered", "--kv-block-size", "16", "--kv-cache-memory", "240KiB", "--max-model-len",
          "128", "--max-seqs", "8"], 1),
    ]
    diffs = []
    compared = []
    runners = {"old": Runner(a.old, work, "old"), "new": Runner(a.new, work, "new")}
    for name, path, flags, ranks in jobs:
        outs = {s: r.job(name, path, flags, ranks) for s, r in runners.items()}
        n = compare_files(f"run {name} records", outs["old"][0], outs["new"][0], diffs,
                          json_lines=True)
        compare_files(f"run {name} --stats", outs["old"][1], outs["new"][1], diffs, json_whole=True)
        compared.append(f"run {name}: {n} records and --stats")
    for name in ("fields.jsonl", "fields_batch.jsonl", "chat.jsonl", "sampling.jsonl"):
        outs = {}
        for s, r in runners.items():
            out = os.path.join(r.work, "tokenize_" + name)
            r.run("tokenize_" + name, ["tokenize", "--model", r.model, "--input", inp[name],
                                       "--output", out, "--overwrite", "--chat-template",
                                       template], ranks=0)
            outs[s] = out
        n = compare_files(f"tokenize {name}", outs["old"], outs["new"], diffs)
        compared.append(f"tokenize {name}: {n} lines")
    for name, args in (("plan", ["plan", "--shape", "llama2-70b", "--nodes", "2",
                                 "--gpus-per-node", "4", "--gpu", "h100-80g"]),
                       ("plan_cpu", ["plan", "--shape", "110m", "--nodes", "1",
                                     "--gpus-per-node", "2", "--gpu", "cpu"]),
                       ("plan_json", ["plan", "--shape", "qwen2.5-72b", "--nodes", "4",
                                      "--gpus-per-node", "8", "--json", "plan.json"])):
        outs = {}
        for s, r in runners.items():
            code, stdout = r.run(name, args, ranks=0, check=False)
            path = os.path.join(r.work, name + ".out")
            with open(path, "w") as f:
                f.write(f"exit {code}\n{stdout}")
            outs[s] = path
        compare_files(name, outs["old"], outs["new"], diffs)
        compared.append(name)
    compare_files("plan --json", os.path.join(runners["old"].work, "plan.json"),
                  os.path.join(runners["new"].work, "plan.json"), diffs)
    outs = {}
    for s, r in runners.items():
        out = os.path.join(r.work, "ppl.json")
        windows = os.path.join(r.work, "ppl.windows.jsonl")
        r.run("perplexity", ["perplexity", "--model", r.model, "--input", corpus, "--output", out,
                             "--windows", windows, "--overwrite", "--threads", "1"])
        outs[s] = (out, windows)
    compare_files("perplexity --output", outs["old"][0], outs["new"][0], diffs, json_whole=True)
    n = compare_files("perplexity --windows", outs["old"][1], outs["new"][1], diffs)
    compared.append(f"perplexity: --output and {n} windows")

    benches = [("bench", ["--prompts", "8", "--input-len", "16:40", "--output-len", "8"]),
               ("bench_prefix", ["--prompts", "6", "--shared-prefix", "24", "--input-len", "8",
                                 "--output-len", "4"]),
               ("bench_scoring", ["--prompts", "4", "--continuations", "3", "--input-len", "20",
                                  "--output-len", "6"])]
    for name, flags in benches:
        outs = {}
        for s, r in runners.items():
            out = os.path.join(r.work, name + ".json")
            r.run(name, ["bench", "--shape", "tiny", "--random-weights", "--no-limits",
                         "--threads", "1", "--json", out] + flags)
            outs[s] = out
        compare_files(name + " --json", outs["old"], outs["new"], diffs, json_whole=True)
        compared.append(name + " --json")

    if diffs:
        print("\n".join(diffs))
        print(f"FAIL: {len(diffs)} output(s) differ (work directory {work})")
        sys.exit(1)
    print("\n".join(compared))
    print(f"same: every output above is identical between {a.old} and {a.new} (timings masked)")
    if not a.keep and not a.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
