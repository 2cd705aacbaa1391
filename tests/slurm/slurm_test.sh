#!/usr/bin/env bash
# Usage: tests/slurm/slurm_test.sh BUILD_DIR MODELS_DIR
#
# Runs the sbatch template on a real one-node Slurm cluster that this script starts itself
# (munged, slurmctld, slurmd; proctrack/linuxproc, task/none: no cgroups or systemd needed), as
# root. Checks (1) a 4-task job on stories260K (tp 2 x pp 2) writes the reference greedy texts,
# identical to a single-rank run, (2) USR1 to the batch shell makes tpllama stop early, the
# template requeue the job, and the requeued job finish with every id exactly once, and (3) USR1 to
# every process of the job (scancel --full) is one stop, not a second. Exits 77
# (skipped) when Slurm is not installed or not root.
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
models=$(cd "${TPLLAMA_MODELS_DIR:-${2:?models dir}}" && pwd)
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
command -v slurmctld >/dev/null && command -v munged >/dev/null || { echo "SKIP: slurm-wlm/munge not installed"; exit 77; }
[[ $EUID -eq 0 ]] || { echo "SKIP: needs root to start the Slurm daemons"; exit 77; }
[[ -f $models/stories260K/stories260K.bin ]] || { echo "FAIL: $models/stories260K missing (it ships with the project)"; exit 1; }

work=$(mktemp -d /tmp/tpllama_slurm.XXXXXX)
chmod 755 "$work"
export SLURM_CONF=$work/slurm.conf
cleanup() {
  scancel --quiet --user root 2>/dev/null || true
  [[ -f $work/slurmd.pid ]] && kill "$(cat "$work/slurmd.pid")" 2>/dev/null || true
  [[ -f $work/slurmctld.pid ]] && kill "$(cat "$work/slurmctld.pid")" 2>/dev/null || true
  [[ -f $work/munge/munged.pid ]] && kill "$(cat "$work/munge/munged.pid")" 2>/dev/null || true
  sleep 1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log "$work"/job*.out; do [[ -f $f ]] && { echo "== $f"; tail -20 "$f"; }; done; exit 1; }

host=$(hostname -s)
mkdir -p "$work/state" "$work/spool" "$work/munge"
chown munge:munge "$work/munge"
runuser -u munge -- /usr/sbin/munged --socket="$work/munge/munge.socket" --pid-file="$work/munge/munged.pid" \
  --log-file="$work/munge/munged.log" --force
# cred_expire: a requeued job waits this long before it starts again (default 120 s).
cat > "$SLURM_CONF" <<CONF
ClusterName=tpllamatest
SlurmctldHost=$host
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket,cred_expire=20
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ReturnToService=2
JobRequeue=1
MpiDefault=none
NodeName=$host CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
slurmctld -c -f "$SLURM_CONF"
slurmd -c -f "$SLURM_CONF"
for _ in $(seq 60); do
  [[ "$(sinfo -h -o %T 2>/dev/null)" == idle ]] && break
  sleep 1
done
[[ "$(sinfo -h -o %T 2>/dev/null)" == idle ]] || fail "the test node never became idle: $(sinfo 2>&1)"

model=$work/stories260K
"$build/tpllama" convert --from llama2c --checkpoint "$models/stories260K/stories260K.bin" \
  --tokenizer "$models/stories260K/tok512.model" --out "$model" 2>/dev/null
export TPLLAMA_BIN=$build/tpllama OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
wait_done() {  # job id, seconds
  for _ in $(seq "$2"); do
    [[ -z "$(squeue -h -j "$1" 2>/dev/null)" ]] && return 0
    sleep 1
  done
  fail "job $1 still queued or running after $2 s: $(squeue 2>&1)"
}

# (1) A 4-task job: tp 2 x pp 2, the reference prompts.
python_free_prompts=$work/prompts.txt
printf 'Once upon a time\nThe little dog\n' > "$python_free_prompts"
"$build/tpllama" run --model "$model" --input "$python_free_prompts" --output "$work/single.jsonl" \
  --max-tokens 60 2>/dev/null
job=$(sbatch --parsable --ntasks=4 --output="$work/job1.out" "$source_dir/scripts/slurm/tpllama.sbatch" \
  "$model" "$python_free_prompts" "$work/out1.jsonl" --tp 2 --pp 2 --max-tokens 60)
wait_done "$job" 120
cmp <(sort "$work/single.jsonl") <(sort "$work/out1.jsonl") || fail "4-task Slurm job output differs from one rank"
grep -q '"output_tokens_per_second"' "$work/out1.jsonl.stats.json" || fail "no stats file next to the output"
grep -q "srun --mpi=pmix" "$work/job1.out" && echo "launched with srun --mpi=pmix" || echo "launched with mpirun"
grep -q '"Once upon a time' "$work/out1.jsonl" && fail "text should be the completion only"
grep -q 'there was a little girl named Lily' "$work/out1.jsonl" || fail "reference text missing"

# (2) USR1 before the end: stop early, requeue, resume, exactly once. The job takes one sequence
# at a time (greedy output does not depend on --max-seqs) and 40 tokens each, so it runs for
# seconds (about 5 under mpirun on a quiet machine), long after the signal: with 64 at a time and
# 12 tokens such a machine finished all 3000 in 0.4 s, before the first look at the output.
awk 'BEGIN { for (i = 0; i < 3000; i++) printf "Once upon a time %d\n", i }' > "$work/many.txt"
"$build/tpllama" run --model "$model" --input "$work/many.txt" --output "$work/many_single.jsonl" \
  --max-tokens 40 --threads 1 2>/dev/null
job=$(sbatch --parsable --ntasks=2 --output="$work/job2.out" "$source_dir/scripts/slurm/tpllama.sbatch" \
  "$model" "$work/many.txt" "$work/out2.jsonl" --pp 2 --max-tokens 40 --max-seqs 1)
for _ in $(seq 600); do
  [[ -f $work/out2.jsonl && $(wc -l < "$work/out2.jsonl") -ge 200 ]] && break
  sleep 0.1
done
done_before=$(wc -l < "$work/out2.jsonl" 2>/dev/null || echo 0)
(( done_before < 3000 )) || fail "job 2 finished all 3000 requests before USR1 could be sent"
scancel --batch --signal=USR1 "$job"
wait_done "$job" 300
grep -q "requeueing job" "$work/job2.out" || fail "the job was not requeued after USR1"
[[ $(wc -l < "$work/out2.jsonl") -eq 3000 ]] || fail "expected 3000 records, got $(wc -l < "$work/out2.jsonl")"
cmp <(sort "$work/many_single.jsonl") <(sort "$work/out2.jsonl") || fail "requeued output differs from an uninterrupted run"

# (3) scancel --full --signal=USR1: Slurm signals every process of the job, the ranks too, and the
# launcher passes it on again, within milliseconds. That is one stop, not a second ("stop now"):
# the running request finishes, and the job is requeued and completes.
job=$(sbatch --parsable --ntasks=2 --output="$work/job3.out" "$source_dir/scripts/slurm/tpllama.sbatch" \
  "$model" "$work/many.txt" "$work/out3.jsonl" --pp 2 --max-tokens 40 --max-seqs 1)
for _ in $(seq 600); do
  [[ -f $work/out3.jsonl && $(wc -l < "$work/out3.jsonl") -ge 200 ]] && break
  sleep 0.1
done
(( $(wc -l < "$work/out3.jsonl" 2>/dev/null || echo 0) < 3000 )) || fail "job 3 finished before the signal"
scancel --full --signal=USR1 "$job"
wait_done "$job" 300
grep -q "requeueing job" "$work/job3.out" || fail "the job was not requeued after scancel --full --signal=USR1"
grep -q "a second stop signal" "$work/job3.out" && fail "one stop that reached the ranks twice was taken for a second"
cmp <(sort "$work/many_single.jsonl") <(sort "$work/out3.jsonl") || fail "job 3's output differs from an uninterrupted run"
echo "PASS: Slurm 4-task job equals one rank; USR1 -> exit 75 -> requeue -> resume gave 3000 records exactly once;" \
  "scancel --full --signal=USR1 is one stop"
