#!/usr/bin/env bash
# Usage: scripts/bench/penalties.sh [PAIRS] [SHAPE]
#
# The cost of penalties and biases on decode: 32 sequences of 128 prompt tokens, 128 generated
# (EOS ignored), on seeded random weights of SHAPE (default 110m) with a 32000-token vocabulary, one
# rank; all penalties on (repetition 1.1 over prompt and completion, frequency 0.2, presence 0.1,
# 16 logit_bias entries, min_tokens 16) against none, alternating (PAIRS runs of each, default 3),
# greedy and sampled (temperature 0.8). Prints each run's decode rate (output tokens/s and median
# time per output token), then per mode the median on/off ratio of the rates and its range.
set -euo pipefail
source "$(dirname "$0")/env.sh"
pairs=${1:-3}
shape=${2:-110m}
model="$out/model"
"$bin" convert --from random --shape "$shape" --vocab 32000 --seed 7 \
  --tokenizer models/stories260K/tok512.model --out "$model" > /dev/null
python3 - "$out" <<'PY'
import json, random, sys
d = sys.argv[1]
rng = random.Random(11)
prompts = [[1] + [rng.randrange(3, 32000) for _ in range(127)] for _ in range(32)]
bias = {str(rng.randrange(3, 32000)): rng.uniform(-5, 5) for _ in range(16)}
for mode, temperature in (("greedy", 0.0), ("sampled", 0.8)):
    for pen in ("on", "off"):
        with open(f"{d}/{mode}-{pen}.jsonl", "w") as f:
            for i, p in enumerate(prompts):
                r = {"id": i, "prompt": p, "max_tokens": 128, "ignore_eos": True,
                     "temperature": temperature, "seed": i}
                if pen == "on":
                    r.update({"repetition_penalty": 1.1, "frequency_penalty": 0.2,
                              "presence_penalty": 0.1, "logit_bias": bias, "min_tokens": 16})
                f.write(json.dumps(r) + "\n")
PY
for mode in greedy sampled; do
  for ((i = 1; i <= pairs; i++)); do
    for pen in on off; do
      stats="$out/$mode-$pen-$i.json"
      "$bin" run --model "$model" --input "$out/$mode-$pen.jsonl" --output "$out/o.jsonl" \
        --max-seqs 32 --log-interval 0 --stats "$stats" > /dev/null 2>&1
      rm -f "$out/o.jsonl"*
      python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f'{sys.argv[2]:7} penalties {sys.argv[3]:3} run {sys.argv[4]}: {j[\"output_tokens_per_second\"]:8.1f} output tok/s, TPOT median {1e3*j[\"tpot_seconds\"][\"p50\"]:7.2f} ms')" \
        "$stats" "$mode" "$pen" "$i"
    done
  done
  python3 - "$out" "$mode" "$pairs" <<'PY'
import json, statistics, sys
d, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rate = lambda pen, i: json.load(open(f"{d}/{mode}-{pen}-{i}.json"))["output_tokens_per_second"]
ratios = [rate("on", i) / rate("off", i) for i in range(1, n + 1)]
print(f"{mode}: penalties on/off = {statistics.median(ratios):.3f} of the output rate "
      f"(pairs {min(ratios):.3f}-{max(ratios):.3f})")
PY
done
