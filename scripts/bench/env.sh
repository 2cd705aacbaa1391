# Sourced (not run) by the benchmark scripts: moves to the repository root and sets `bin` (the
# tpllama binary, $TPLLAMA to override), `out` (a scratch directory removed at exit) and mpirun's
# settings for a machine with few cores, run as root where that is the case.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=${TPLLAMA:-build/tpllama}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# cpu.sh's prefill-128, decode-1 and decode-32 workloads by name: the flags of each, which the
# scripts comparing rates (ab.sh, int8.sh, plan_vs_bench.sh) add to their own.
declare -A workload=(
  [prefill-128]="--prompts 8 --max-seqs 1 --input-len 128 --output-len 1"
  [decode-1]="--prompts 1 --input-len 128 --output-len 128"
  [decode-32]="--prompts 32 --input-len 128 --output-len 128"
)
