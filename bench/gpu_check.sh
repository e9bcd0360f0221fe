#!/usr/bin/env bash
# Every GPU measurement of the book in one call on one CUDA GPU, in under 8 minutes.
#
#   OUT=/empty/dir bash bench/gpu_check.sh     run it (from the repository root, on the GPU machine)
#   bash bench/gpu_check.sh --dry-run          print the plan and check every script's --help (any machine)
#
# It uses the machine's own python3 (PYTHON=... overrides) with
# PYTHONPATH=companion/src: no virtual environment and no network needed.
# Steps, in order, each under `timeout` (its process group is killed, so
# nothing hangs) and all under one deadline (GPU_CHECK_BUDGET seconds, default 450):
#   1. info          versions, GPU, gputrain info                          ~10 s
#   2. ladder        `gputrain bench --preset gpu` (GPT-2 small, 8 rungs,  ~120-200 s
#                    three torch.compile builds); its own cap stops it early and it
#                    writes its JSON after every rung and round, so a cut keeps data
#   3. bench/gpu/*   matmul, chunked_loss, memory_check, fp8_gemm,          ~20-60 s each
#                    data_pipeline, kernels (chapter 11's Triton kernels against torch),
#                    nccl_allreduce (2+ GPUs only), then any other script
#   4. pytest-gpu    the unit tests marked `gpu` (whatever time is left)    ~40-90 s
# A failing step is recorded and the next one runs.  The GPU is never reset or
# reconfigured.  What comes back (at most 4 files):
#   $OUT/results.tar.gz   results/*.json (copy into book/results/) and logs/*.log
#   $OUT/summary.txt      one line per step: status, seconds, exit code
#   $OUT/log.txt          every step's output, concatenated
#   $OUT/ladder.json      the speed ladder, also inside the tarball
set -u
set -o pipefail

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET:-455}   # seconds for all steps; the tarball takes a few more
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1

export PYTHONPATH="$ROOT/companion/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset GPUTRAIN_PRESET  # the GPU decides: preset "gpu"

# Scripts in bench/gpu/ in this order first (cheap and most used), then any others.
ORDER="matmul kernels chunked_loss memory_check fp8_gemm data_pipeline nccl_allreduce"
SCRIPT_CAP=75      # seconds per bench/gpu script (each is written to take under 60; two get more below)
PYTEST_CAP=120
LADDER_CAP=270
LADDER_MAX=230     # the ladder's own --max-seconds: no rung starts after 3/4 of it
RESERVE=15         # kept back from the deadline for the tarball

scripts() {
    local seen=" " name
    for name in $ORDER; do
        [ -f "bench/gpu/$name.py" ] && { echo "bench/gpu/$name.py"; seen="$seen$name "; }
    done
    for f in bench/gpu/*.py; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .py)
        case "$seen" in *" $name "*) ;; *) echo "$f" ;; esac
    done
}

gpu_tests() {  # test files that hold at least one test marked gpu
    grep -l "mark\.gpu" tests/test_*.py 2>/dev/null | tr '\n' ' '
}

PYTEST_CMD="$PY -m pytest -c tests/pytest.ini --rootdir $ROOT -o addopts= -p no:cacheprovider -m gpu -q -rA --timeout 100 --continue-on-collection-errors"

if [ "$DRY" = 1 ]; then
    echo "gpu_check plan (budget ${BUDGET}s + ${RESERVE}s for the tarball; python: $PY)"
    echo "  info        nvidia-smi; $PY -m gputrain info --json"
    echo "  ladder      cap ${LADDER_CAP}s: $PY -m gputrain bench --preset gpu --out RESULTS/ladder.json --no-loop-overhead --max-seconds $LADDER_MAX"
    for f in $(scripts); do
        printf '  %-15s %s\n' "$(basename "$f" .py)" "$PY $f --out RESULTS"
    done
    echo "  pytest-gpu  cap ${PYTEST_CAP}s: $PYTEST_CMD $(gpu_tests)"
    echo
    echo "checking that every script parses its arguments here:"
    bad=0
    for f in $(scripts); do
        if timeout 120 "$PY" "$f" --help >/dev/null 2>&1; then echo "  ok   $f --help"; else echo "  FAIL $f --help"; bad=1; fi
    done
    if timeout 120 "$PY" -m gputrain bench --preset gpu --dry-run; then echo "  ok   gputrain bench --dry-run"; else bad=1; fi
    exit $bad
fi

if [ -z "${OUT:-}" ]; then
    echo "gpu_check.sh: set OUT to an empty output folder (OUT=/tmp/out bash bench/gpu_check.sh)" >&2
    exit 2
fi
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
RESULTS=$WORK/results
LOGS=$WORK/logs
mkdir -p "$RESULTS" "$LOGS"
SUMMARY=$WORK/summary.txt
START=$(date +%s)
DEADLINE=$((START + BUDGET))
FAILED=0
printf '%-16s %-9s %7s  %s\n' step status seconds note > "$SUMMARY"

left() { echo $((DEADLINE - $(date +%s))); }

# run_step NAME CAP COMMAND...: run under timeout (min of CAP and the time left), log, record
run_step() {
    local name=$1 cap=$2 t0 t1 rc status limit
    shift 2
    limit=$(left)
    [ "$limit" -gt "$cap" ] && limit=$cap
    if [ "$limit" -lt 10 ]; then
        printf '%-16s %-9s %7s  %s\n' "$name" skipped 0 "no time left before the deadline" >> "$SUMMARY"
        echo "=== $name: skipped (deadline)"
        return 0
    fi
    echo "=== $name (limit ${limit}s): $*"
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" < /dev/null > "$LOGS/$name.log" 2>&1
    rc=$?
    t1=$(date +%s)
    case $rc in
        0) status=ok ;;
        124|137) status=TIMEOUT; FAILED=$((FAILED + 1)) ;;
        *) status=FAILED; FAILED=$((FAILED + 1)) ;;
    esac
    printf '%-16s %-9s %7s  exit %s\n' "$name" "$status" $((t1 - t0)) "$rc" >> "$SUMMARY"
    tail -n 5 "$LOGS/$name.log" | sed 's/^/    /'
    echo "--- $name: $status in $((t1 - t0))s"
}

run_step info 30 bash -c "nvidia-smi; $PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count(), torch.cuda.get_device_name(0))'; $PY -m gputrain info --json | tee $RESULTS/info.json"
GPUS=$(timeout 60 "$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null | tail -n 1)
GPUS=${GPUS//[^0-9]/}
GPUS=${GPUS:-0}

run_step ladder $LADDER_CAP "$PY" -m gputrain bench --preset gpu --out "$RESULTS/ladder.json" --no-loop-overhead \
    --max-seconds $LADDER_MAX

for f in $(scripts); do
    name=$(basename "$f" .py)
    if [ "$name" = nccl_allreduce ] && [ "$GPUS" -lt 2 ]; then
        printf '%-16s %-9s %7s  %s\n' "$name" skipped 0 "needs 2+ GPUs, $GPUS visible" >> "$SUMMARY"
        continue
    fi
    case $name in
        fp8_gemm) cap=100 ;;      # four parts, the last a 0.6 B-parameter GPT in three precisions
        memory_check) cap=90 ;;
        kernels) cap=100 ;;       # compiles ~15 Triton kernels; its own --max-seconds 80 stops new cases
        *) cap=$SCRIPT_CAP ;;
    esac
    run_step "$name" $cap "$PY" "$f" --out "$RESULTS"
done

TESTS=$(gpu_tests)
if [ -n "$TESTS" ]; then
    # shellcheck disable=SC2086  # word splitting of the command and the file list is intended
    run_step pytest-gpu $PYTEST_CAP $PYTEST_CMD --junitxml="$RESULTS/pytest_gpu.xml" $TESTS
fi

END=$(date +%s)
printf '\ntotal %ss, %s step(s) failed; GPU(s): %s; results: %s\n' $((END - START)) "$FAILED" "$GPUS" \
    "$(cd "$RESULTS" && ls | tr '\n' ' ')" >> "$SUMMARY"
cp "$SUMMARY" "$OUT/summary.txt"
for log in "$LOGS"/*.log; do
    printf '\n===== %s =====\n' "$(basename "$log")"
    cat "$log"
done > "$OUT/log.txt"
[ -f "$RESULTS/ladder.json" ] && cp "$RESULTS/ladder.json" "$OUT/ladder.json"
tar -czf "$OUT/results.tar.gz" -C "$WORK" results logs summary.txt
rm -rf "$WORK"
echo
cat "$OUT/summary.txt"
[ "$FAILED" -eq 0 ]
