#!/usr/bin/env bash
# Usage: scripts/bench/samples.sh [ROUNDS] [SHAPE] [PROMPT_TOKENS]
#
# n samples against separate requests: 64 prompts of PROMPT_TOKENS tokens (default 512) with
# n = 8 each (one record of 8 choices), against the same 512 samples as separate requests (each
# prompt 8 times, seeded so each equals one sample), 32 tokens generated per sample (EOS ignored,
# temperature 0.8, top_k 50: random weights give nearly flat distributions, which without a top-k
# make the draw sort most of the vocabulary), on seeded random weights of SHAPE (default tiny) with
# a 32000-token vocabulary,
# one rank, --max-seqs 64, the prefix cache off (it would otherwise serve the repeats' full
# blocks). The two alternate, ROUNDS runs of each (default 3). Prints each run's elapsed time,
# output rate and prompt tokens computed, then the median n/separate ratio of the output rates.
set -euo pipefail
source "$(dirname "$0")/env.sh"
rounds=${1:-3}
shape=${2:-tiny}
prompt_tokens=${3:-512}
model="$out/model"
"$bin" convert --from random --shape "$shape" --vocab 32000 --seed 7 \
  --tokenizer models/stories260K/tok512.model --out "$model" > /dev/null
python3 - "$out" "$prompt_tokens" <<'PY'
import json, random, sys
d, length = sys.argv[1], int(sys.argv[2])
gamma, mask = 0x9E3779B97F4A7C15, (1 << 64) - 1
def splitmix64(z):  # the stream seed of sample k (src/README.md, Samples)
    z = (z + gamma) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)
rng = random.Random(5)
prompts = [[1] + [rng.randrange(3, 32000) for _ in range(length - 1)] for _ in range(64)]
common = {"max_tokens": 32, "ignore_eos": True, "temperature": 0.8, "top_k": 50}
with open(f"{d}/n.jsonl", "w") as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"id": i, "prompt": p, "n": 8, "seed": 1000 + i, **common}) + "\n")
with open(f"{d}/separate.jsonl", "w") as f:
    for i, p in enumerate(prompts):
        for k in range(8):
            seed = 1000 + i if k == 0 else splitmix64((1000 + i) ^ ((k * gamma) & mask))
            f.write(json.dumps({"id": f"{i}.{k}", "prompt": p, "seed": seed, **common}) + "\n")
PY
for ((i = 1; i <= rounds; i++)); do
  for mode in n separate; do
    stats="$out/$mode-$i.json"
    "$bin" run --model "$model" --input "$out/$mode.jsonl" --output "$out/$mode-$i.out.jsonl" \
      --max-seqs 64 --prefix-caching off --log-interval 0 --stats "$stats" > /dev/null 2>&1
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f'{sys.argv[2]:8} run {sys.argv[3]}: {j[\"elapsed_seconds\"]:7.2f} s, {j[\"output_tokens_per_second\"]:8.1f} output tok/s, prompt tokens computed {j[\"prompt_tokens_computed\"]}')" \
      "$stats" "$mode" "$i"
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
rate = lambda mode, i: json.load(open(f"{d}/{mode}-{i}.json"))["output_tokens_per_second"]
ratios = [rate("n", i) / rate("separate", i) for i in range(1, n + 1)]
# The same texts both ways: sample k of request i is request i.k.
texts = {}
for line in open(f"{d}/separate-1.out.jsonl"):
    r = json.loads(line)
    texts[r["id"]] = r["text"]
same = sum(c["text"] == texts[f"{r['id']}.{c['index']}"]
           for line in open(f"{d}/n-1.out.jsonl") for r in [json.loads(line)] for c in r["choices"])
print(f"n = 8 / separate: {statistics.median(ratios):.2f}x the output rate "
      f"(rounds {min(ratios):.2f}-{max(ratios):.2f}); {same} of 512 samples equal their request")
PY
