#!/usr/bin/env bash
# The GPU checks of one lent device call (the `device` tool runs it in the repo root; logs go to $OUT):
#   correctness first, in parallel (the GPU smoke cases, a GPU fuzz run of inference and of training),
#   then, alone on the machine, the timings of bench/gpu.py.
#   bench/gpu_session.sh [SECONDS_OF_FUZZ] [BENCH_ARGS...]    e.g. bench/gpu_session.sh 90 --no-1b
#   (SEED, TRAIN_SEED: the fuzz runs' seeds, e.g. TRAIN_SEED=26112710 to rerun an earlier training run)
# Each step has its own time limit and its log under $OUT (the tool brings back 8 files at most).
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
FUZZ_S=${1:-90}
shift || true
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} DYNASHAPE_CACHE_DIR=/tmp/ds-cache
PY=${PY:-python3}
SEED=${SEED:-$(date +%y%m%d%H)}

$PY -c "import torch, triton, sympy, transformers as t; print('torch', torch.__version__, 'triton', triton.__version__,
'sympy', sympy.__version__, 'transformers', t.__version__, torch.cuda.get_device_name())" 2>&1 | tee "$OUT/versions.txt"
nproc; g++ --version | head -1

step() {  # step NAME SECONDS CMD...: the log in $OUT/NAME.txt, its tail printed at the end
    local name=$1 secs=$2
    shift 2
    echo "=== $name started $(date +%T), limit ${secs}s"
    timeout -k 10 "$secs" "$@" > "$OUT/$name.txt" 2>&1
    echo "=== $name rc=$? at $(date +%T)" | tee -a "$OUT/$name.txt"
}

minutes=$(python3 -c "print($FUZZ_S / 60)")
step smoke $((FUZZ_S + 120)) $PY bench/gpu_smoke.py &
step fuzz-infer $((FUZZ_S + 60)) $PY -m tests.fuzz --device cuda --minutes "$minutes" --seed "$SEED" \
    --reduce-seconds 10 --out /tmp/fz &
step fuzz-train $((FUZZ_S + 60)) $PY -m tests.fuzz --device cuda --mode train --minutes "$minutes" \
    --seed "${TRAIN_SEED:-$((SEED + 1))}" --reduce-seconds 10 --out /tmp/fz &
wait
[ -d /tmp/fz ] && tar czf "$OUT/fuzz-failures.tgz" -C /tmp fz
step bench "${BENCH_S:-420}" $PY bench/gpu.py "$@"
for f in smoke fuzz-infer fuzz-train bench; do
    echo "----- $f (last lines)"
    grep -v '^  File \|^    ' "$OUT/$f.txt" | tail -n "${TAIL:-25}"
done
