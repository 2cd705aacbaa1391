#!/usr/bin/env bash
# Usage: scripts/bench/long_context.sh [CONTEXTS] [SEQS]
#
# Prefill and decode of SEQS sequences (default 32) at long contexts (CONTEXTS, default "2048
# 8192": prompt tokens, then 32 generated), on seeded random weights of the 110m shape with grouped
# kv heads (12 query heads, 4 kv heads) and a 16384-position context, held as int8, 2 threads, with
# an f32 and a bf16 KV cache. Prints per run the prefill and decode rates, the share of attention
# (and of the KV write) in prefill and in decode steps from bench --op-split, and the KV cache's
# bytes per token (2 x layers x kv heads x head_dim x the dtype's size).
set -euo pipefail
source "$(dirname "$0")/env.sh"
contexts=${1:-"2048 8192"}
seqs=${2:-32}
python3 - "$out/config.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768,
           "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
           "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 16384,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False},
          open(sys.argv[1], "w"))
PY
"$bin" convert --from random --config "$out/config.json" --dtype int8 --seed 3 \
  --tokenizer models/stories260K/tok512.model --vocab 32000 --out "$out/model" > /dev/null
for ctx in $contexts; do
  for kv in f32 bf16; do
    "$bin" bench --model "$out/model" --dtype int8 --kv-dtype "$kv" --threads 2 --prompts "$seqs" \
      --max-seqs "$seqs" --input-len "$ctx" --output-len 32 --op-split --no-limits \
      --json "$out/$ctx-$kv.json" > /dev/null 2>&1
    python3 - "$out/$ctx-$kv.json" "$ctx" "$kv" "$seqs" <<'PY'
import json, sys
j, ctx, kv, seqs = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
def share(phase, op):
    s = j["op_split"][phase]
    for e in s["ops"]:
        if e["op"] == op:
            return 100 * e["fraction"]
    return 0.0
kv_bytes = 2 * 12 * 4 * 64 * (4 if kv == "f32" else 2)
print(f"context {ctx}, {seqs} sequences, KV {kv} ({kv_bytes} bytes/token, "
      f"{kv_bytes * int(ctx) * int(seqs) / 2**30:.2f} GiB at full context): "
      f"prefill {j['prefill_tokens_per_second']:.0f} tok/s (attention {share('prefill', 'attention'):.1f}%, "
      f"KV write {share('prefill', 'KV write'):.1f}%), decode {j['decode_tokens_per_second'] or 0:.1f} tok/s "
      f"(attention {share('decode', 'attention'):.1f}%, KV write {share('decode', 'KV write'):.1f}%)")
PY
  done
done
