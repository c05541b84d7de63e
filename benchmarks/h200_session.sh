#!/usr/bin/env bash
# One device session on the lent H200 (see ../shared/device/README.md): certify, tune,
# bench against torch, the recurrent sweep and the farm-overhead benchmark, in one call.
#   run: source .devkit/setup.sh && bash benchmarks/h200_session.sh
# Results land flat in $OUT (the device tool brings back at most 8 files).
set -u
export PYTHONPATH=$PWD:${PYTHONPATH:-}
W=/tmp/h200; mkdir -p "$W"; OUT=${OUT:-$W/out}; mkdir -p "$OUT"
DB="sqlite:///$W/farm.db"
LOG="$OUT/session.log"
step() { local t=$1; shift; echo "=== $(date -u +%FT%TZ) $* (limit ${t}s)" | tee -a "$LOG"
         local s=$SECONDS; timeout "$t" "$@" 2>&1 | tee -a "$LOG"; echo "=== rc=${PIPESTATUS[0]} in $((SECONDS - s))s" | tee -a "$LOG"; }
nvidia-smi -L | tee -a "$LOG"
if [ -z "${SKIP_CERTIFY:-}" ]; then
  step 30  python3 -m farm adapters
  step 100 python3 -m farm certify --all --schedules 4
fi
step ${TUNE_LIMIT:-300} python3 -m farm tune --all --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}
step 120 python3 -m farm bench --db "$DB" --out "$W/bench"
step 120 python3 -m farm sweep recurrent --db "$DB" --output-dir "$W/sweep"
step 90  python3 benchmarks/variants.py --out "$W/variants"
step 60  python3 benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --schedules 32 --out "$W/overhead"
cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null
cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null
cp "$W"/overhead/*.json "$OUT"/overhead.json 2>/dev/null
cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
ls -la "$OUT"
