#!/usr/bin/env bash
# One device session on the lent H200 machine (see ../shared/device/README.md), in two
# calls that each fit the 10-minute limit; part 1's SQLite database travels to part 2
# through $OUT -> .h200/ (git-ignored; carry it).
#   part 1: source .devkit/setup.sh && PART=1 bash benchmarks/h200_session.sh
#           tune --all on ONE GPU (the 5-minute target), then bench against torch/fla
#   part 2: (copy part 1's farm.db to .h200/farm.db, carry [".devkit", ".h200"])
#           source .devkit/setup.sh && PART=2 bash benchmarks/h200_session.sh
#           recurrent sweep, configs/s at 1 and 2 GPUs, farm overhead, variants
#   part 3: tune --all on one GPU, configs/s at 1 and 2 GPUs, bench (one call)
#   part 4: configs/s at 1 and 2 GPUs, the ternary probe, farm overhead, tune --all
#   part 5: (one GPU) configs/s, farm overhead, tune --all, bench, recurrent sweep
#   part 6: (x2) configs/s at 1 and 2 GPUs, farm overhead, the ternary probe
#   part 7: (x2, right after part 6) tune --all on one GPU, bench, recurrent sweep
#   part 8: (x2) configs/s at 1 and 2 GPUs, one-worker overhead, tune --all on one GPU, bench, sweep
# Results land flat in $OUT (the device tool brings back at most 8 files).
set -u
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
W=/tmp/h200; mkdir -p "$W"; OUT=${OUT:-$W/out}; mkdir -p "$OUT"
mkdir -p .h200; DB="sqlite:///$PWD/.h200/farm.db"
LOG="$OUT/session${PART:-1}.log"
step() { local t=$1; shift; echo "=== $(date -u +%FT%TZ) $* (limit ${t}s)" | tee -a "$LOG"
         local s=$SECONDS; timeout -s INT -k 20 "$t" "$@" 2>&1 | grep -v "Token authentication is enabled" | tee -a "$LOG"
         echo "=== rc=${PIPESTATUS[0]} in $((SECONDS - s))s" | tee -a "$LOG"; }
nvidia-smi -L | tee -a "$LOG"
if [ "${PART:-1}" = 1 ]; then
  step ${TUNE_LIMIT:-330} python3 -m farm tune --all --gpus 1 --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}
  step 200 python3 -m farm bench --db "$DB" --out "$W/bench"
  cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null
  cp .h200/farm.db "$OUT"/farm.db
elif [ "${PART}" = 3 ]; then  # the short form: tune, configs/s, bench (fits one call)
  step ${TUNE_LIMIT:-290} python3 -m farm tune --all --gpus 1 --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}
  step 150 python3 benchmarks/throughput.py --gpus 1,2 --configs ${CONFIGS:-192} --reps 7 --out "$W/tp"
  step 130 python3 -m farm bench --db "$DB" --out "$W/bench"
  cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null
  cp "$W"/tp/*.json "$OUT"/throughput.json 2>/dev/null
elif [ "${PART}" = 4 ]; then  # farm throughput after a worker change, and the ternary probe
  step 150 python3 benchmarks/throughput.py --gpus 1,2 --configs ${CONFIGS:-192} --reps 7 --out "$W/tp"
  step 90  python3 benchmarks/ternary_probe.py --out "$W/probe"
  step 60  python3 benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --schedules 32 --out "$W/overhead"
  step ${TUNE_LIMIT:-250} python3 -m farm tune --all --gpus 1 --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}
  cp "$W"/tp/*.json "$OUT"/throughput.json 2>/dev/null
  cp "$W"/probe/ternary_probe.json "$OUT"/ 2>/dev/null
  cp "$W"/overhead/*.json "$OUT"/overhead.json 2>/dev/null
elif [ "${PART}" = 5 ]; then  # everything on a one-GPU machine, each result copied as it lands
  step 90  python3 benchmarks/throughput.py --gpus 1 --configs ${CONFIGS:-192} --reps 7 --out "$W/tp"
  cp "$W"/tp/*.json "$OUT"/throughput.json 2>/dev/null
  step 45  python3 benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --schedules 32 --out "$W/overhead"
  cp "$W"/overhead/*.json "$OUT"/overhead.json 2>/dev/null
  step ${TUNE_LIMIT:-200} python3 -m farm tune --all --gpus 1 --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}
  step 130 python3 -m farm bench --db "$DB" --out "$W/bench"
  cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null
  step 110 python3 -m farm sweep recurrent --db "$DB" --output-dir "$W/sweep"
  cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null
elif [ "${PART}" = 6 ]; then  # two-GPU machine, call A: configs/s at 1 and 2 GPUs, overhead, probe
  step 160 python3 benchmarks/throughput.py --gpus 1,2 --configs ${CONFIGS:-192} --reps 7 --out "$W/tp"
  cp "$W"/tp/*.json "$OUT"/throughput.json 2>/dev/null
  step 60  python3 benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --schedules 32 --out "$W/overhead"
  cp "$W"/overhead/*.json "$OUT"/overhead.json 2>/dev/null
  # the first shape a probe times can read slow (see NOTES, session 4): tall, wide, tall again
  step 90  python3 benchmarks/ternary_probe.py --shape 65536x16384 --shape 16384x65536 --shape 65536x16384 --out "$W/probe"
  cp "$W"/probe/ternary_probe.json "$OUT"/ 2>/dev/null
elif [ "${PART}" = 7 ]; then  # two-GPU machine, call B: tune --all on ONE of its GPUs, bench, sweep
  step ${TUNE_LIMIT:-220} python3 -m farm tune --all --gpus 1 --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}
  step 150 python3 -m farm bench --db "$DB" --out "$W/bench"
  cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null
  step 120 python3 -m farm sweep recurrent --db "$DB" --output-dir "$W/sweep"
  cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null
elif [ "${PART}" = 8 ]; then  # two-GPU machine, one call: configs/s at 1 and 2 GPUs, one-worker overhead, tune, bench, sweep
  step 160 python3 benchmarks/throughput.py --gpus 1,2 --configs ${CONFIGS:-192} --reps 7 --out "$W/tp"
  cp "$W"/tp/*.json "$OUT"/throughput.json 2>/dev/null
  CUDA_VISIBLE_DEVICES=0 step 60 python3 benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --schedules 32 --out "$W/overhead"
  cp "$W"/overhead/*.json "$OUT"/overhead.json 2>/dev/null
  step ${TUNE_LIMIT:-210} python3 -m farm tune --all --gpus 1 --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}
  step 130 python3 -m farm bench --db "$DB" --out "$W/bench"
  cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null
  step 60 python3 -m farm sweep recurrent --db "$DB" --output-dir "$W/sweep"
  cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null
else
  step 150 python3 -m farm sweep recurrent --db "$DB" --output-dir "$W/sweep"
  step 200 python3 benchmarks/throughput.py --gpus 1,2 --configs ${CONFIGS:-288} --reps 7 --out "$W/tp"
  step 60  python3 benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --schedules 32 --out "$W/overhead"
  step 90  python3 benchmarks/variants.py --out "$W/variants"
  cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null
  cp "$W"/tp/*.json "$OUT"/throughput.json 2>/dev/null
  cp "$W"/overhead/*.json "$OUT"/overhead.json 2>/dev/null
  cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
fi
ls -la "$OUT"
