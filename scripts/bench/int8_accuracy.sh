#!/usr/bin/env bash
# Usage: scripts/bench/int8_accuracy.sh [STORIES]
#
# --dtype int8 against f32 on stories260K (converted from the shipped llama2.c checkpoint):
#   - perplexity on scripts/data/make_story_corpus.py's text (STORIES stories, default 150: about
#     27 000 tokens), and the int8/f32 ratio, which must stay within 1%;
#   - the greedy reference texts of models/stories260K/reference_greedy.jsonl: for each, whether
#     int8 keeps it, and where it does not, the token where it parts and the f32 margin there (the
#     log-probability of f32's choice minus that of int8's: a near-tie when small).
# Exits 1 when the perplexity is off by 1% or more.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${TPLLAMA_BIN:-build/tpllama}
stories=${1:-150}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" convert --checkpoint models/stories260K/stories260K.bin --tokenizer models/stories260K/tok512.model \
  --out "$work/model" > /dev/null 2>&1
scripts/data/make_story_corpus.py --stories "$stories" > "$work/corpus.txt"
for d in f32 int8; do
  "$bin" perplexity --model "$work/model" --input "$work/corpus.txt" --dtype "$d" --output "$work/ppl_$d.json" \
    > /dev/null 2>&1
done
# The reference prompts, generating as many tokens as run.c did, with f32's top alternatives.
python3 - "$work/prompts.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as out:
    for i, line in enumerate(open("models/stories260K/reference_greedy.jsonl")):
        r = json.loads(line)
        n = r["steps"] - len(r["prompt_tokens"]) + 1
        out.write(json.dumps({"id": i, "prompt": r["prompt"], "max_tokens": n, "logprobs": 5, "ignore_eos": True}) + "\n")
PY
for d in f32 int8; do
  "$bin" run --model "$work/model" --input "$work/prompts.jsonl" --output "$work/greedy_$d.jsonl" --dtype "$d" \
    --ordered > /dev/null 2>&1
done
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
ppl = {k: json.load(open(f"{d}/ppl_{k}.json")) for k in ("f32", "int8")}
ratio = ppl["int8"]["perplexity"] / ppl["f32"]["perplexity"]
print(f"perplexity over {ppl['f32']['tokens']} tokens: f32 {ppl['f32']['perplexity']:.4f}, "
      f"int8 {ppl['int8']['perplexity']:.4f}, int8/f32 {ratio:.5f} ({100 * (ratio - 1):+.3f}%)")
runs = {k: [json.loads(l) for l in open(f"{d}/greedy_{k}.jsonl")] for k in ("f32", "int8")}
refs = [json.loads(l) for l in open("models/stories260K/reference_greedy.jsonl")]
for i, ref in enumerate(refs):
    # Completions' logprobs layout: tokens, token_logprobs, top_logprobs ({token text: logprob}).
    a, b = runs["f32"][i]["logprobs"], runs["int8"][i]["logprobs"]
    if a["tokens"] == b["tokens"]:
        print(f"reference {i} ({ref['prompt']!r}): int8 keeps all {len(b['tokens'])} generated tokens")
        continue
    at = next(j for j in range(min(len(a["tokens"]), len(b["tokens"]))) if a["tokens"][j] != b["tokens"][j])
    theirs = a["top_logprobs"][at].get(b["tokens"][at], float("nan"))
    print(f"reference {i} ({ref['prompt']!r}): int8 parts at generated token {at} "
          f"({a['tokens'][at]!r} -> {b['tokens'][at]!r}); f32 margin there {a['token_logprobs'][at] - theirs:.4f} nats")
sys.exit(0 if abs(ratio - 1) < 0.01 else 1)
PY
