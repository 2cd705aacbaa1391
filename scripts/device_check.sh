#!/usr/bin/env bash
# Usage: scripts/device_check.sh [OUT_DIR]   (on the GPU machine, from the repository root;
#        default OUT_DIR: $OUT, else device-check/)
#
# The GPU check for a bare H200 machine (CUDA toolkit, cuBLAS, NCCL, CMake and ninja present; no
# Open MPI and no package registry). First, here: scripts/fetch_device_debs.sh, then run this
# through the device tool with `.debs` carried. It unpacks the packages into a private prefix,
# builds with -arch=sm_90, runs the gpu-labelled op parity tests and writes everything into
# OUT_DIR/device_check.txt (plus the tests' JSON). Not yet here: the end-to-end stories260K run
# and the Llama-2-7B / Llama-3-8B benchmarks, which wait for the model forward on the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-device-check}}
mkdir -p "$out"
exec > >(tee "$out/device_check.txt") 2>&1
start=$(date +%s)
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
  export OPAL_PREFIX=$prefix/usr  # Open MPI finds its wrappers' data and plugins there
  export PATH=$prefix/usr/bin:$PATH
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}
  export CMAKE_PREFIX_PATH=$prefix/usr
  mpi=(-DMPI_CXX_COMPILER="$prefix/usr/bin/mpicxx.openmpi")
else
  echo "== no .debs/ (run scripts/fetch_device_debs.sh here first); using what the machine has"
  mpi=()
fi

echo "== configure and build (sm_90)"
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPLLAMA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${mpi[@]}"
cmake --build build-device --parallel --target gpu_tests
echo "== build done after $(( $(date +%s) - start )) s"

echo "== gpu op parity tests"
status=0
timeout 300 build-device/tests/gpu_tests --gtest_output="json:$out/gpu_tests.json" || status=$?
echo "== gpu_tests exit status $status after $(( $(date +%s) - start )) s"
exit "$status"
