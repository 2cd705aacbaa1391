#!/usr/bin/env bash
# Usage: scripts/data/make_demo_model.sh OUT_DIR [SHAPE] [SEED]
#
# Makes a self-contained demo model without any download: trains a small SentencePiece BPE
# tokenizer (byte fallback on) on models/demo/corpus.txt with spm_train, then writes a
# Hugging Face-style directory with seeded random weights of SHAPE (default tiny) through
# `tpllama convert --from random`. The weights are random, so generations are gibberish; the
# model exists to exercise the whole pipeline. Needs build/tpllama.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: scripts/data/make_demo_model.sh OUT_DIR [SHAPE] [SEED]}
shape=${2:-tiny}
seed=${3:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spm_train --input=models/demo/corpus.txt --model_prefix="$tmp/tokenizer" --vocab_size=600 \
  --model_type=bpe --byte_fallback=true --character_coverage=1.0 --hard_vocab_limit=false \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --minloglevel=2
build/tpllama convert --from random --shape "$shape" --seed "$seed" --tokenizer "$tmp/tokenizer.model" --out "$out"
