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
#   part 9: (one GPU) farm overhead, tune --all, bench
#   part 10: (one GPU) the workgroup-overhead probes, the chunked recurrence's landscape
#            (both forms), the runtime's per-call costs (spin and numpy out= columns)
#   part 11: (one GPU) two independent campaigns re-timed (stability.py --all); their
#            databases come back as a.db and b.db
#   part 12: (one GPU; carry .h200/s9a.db, part 11's a.db) whether background host work moves
#            a trial's GPU time (trial_interference.py), the runtime's per-call costs on
#            part 11's winners with the fixed spinning wait (no host-cost stubs)
#   part 13: (one GPU) after the timed reps went into one submission: the interference
#            probe again, then two independent campaigns re-timed (stability.py --all)
#   part 14: (one GPU; carry .h200/s9a.db) the interference probe (with contiguous lead-ins
#            of 10/30/100 ms and 20/60 ms stalls before each trial), then the runtime's
#            per-call costs with the recorded submissions (its chain rows); after it
#            LABEL=h200-s10 PART=11, and LABEL=h200-s10-fresh SHADER_CACHE=fresh PART=11 (each
#            campaign compiles against an empty shader cache of its own: is the first
#            campaign's slowness its cold cache?)
#   part 15: (one GPU) the SM clock (nvidia-smi) while a short kernel is timed like a trial
#            and back to back (clock_probe.py); session 10's host-unrolled recurrent
#            kernels: the probe pairs (private arrays, serial loads; 8192 and 264
#            workgroups) with the adapter's feature list, the chunked passes' ablation,
#            then recurrent tuned alone on a fresh database (its 11 problems) and benched
#            against FLA; the database comes back as recurrent.db. Session 10 changed
#            recurrent's sources, so .h200/s9a.db's recurrent winners are stale: run part
#            14 with CALLS_DB=<the a.db of a part 11 run made after it>.
#   part 16: (one GPU; CALLS_DB=<a part 11 a.db>, carried) the runtime's per-call costs on its
#            winners, then recurrent benched against FLA on the same winners (all 11 problems)
#   part 17: (same CALLS_DB) the recurrent sweep on those winners (fused column vs part 16)
#   part 20: (one GPU) two fresh campaigns with the competitive re-check, then the f16
#            cooperative-matrix GEMM against cuBLAS fp16 (benchmarks/coop_gemm.py)
#   part 21: (one GPU; CALLS_DB=<part 16's a.db>) coop_gemm, the recurrent sweep on CALLS_DB's
#            winners (against part 16's bench), then the sweep with --long
#   part 29: (one GPU) the three long recurrent problems tuned alone (fresh database) and benched
#            against FLA multiplying fp32 in fp32 (bench's default --vendor-fp32 ieee), then fft
#            tuned and benched alone (single_buffer)
#   part 30: (one GPU) T1024 E768 tuned alone, then benched against FLA chunk_rwkv6 in fp32
#            (ieee) and in TF32, Triton's autotuning printed
#   part 32: (one GPU) gemm's big tiles and fft's radix 32 against session 14's winners
#            (variants.py), farm tune --all, then farm bench of every kernel through fla_pinned.py
#            (FLA in fp32, its autotune pinned): all of issue 17's vendor ratios in one run
#   part 33: (one GPU) fft_twiddles.py (the specialized twiddles A/B), fft tuned and benched
#            alone, then stability.py's two campaigns
#   part 34: (one GPU) gemm's double_buffer 0/1/2 on part 32's winners (variants.py), then gemm
#            tuned and benched alone
#   part 35: (one GPU) fft_twiddles.py (the stage twiddle table against the half table), fft tuned
#            and benched alone (stage_twiddles in the space), fft_twiddles.py again (clocks up)
#   part 36: (one GPU) gemm's unroll_k 0 against 1 on session 15's best schedules (variants.py
#            --match unroll), then gemm tuned (unroll_k twins in the space) and benched alone
#   part 37: (one GPU) parts 35 (without its second A/B) and 36 in one call
#   part 18: (one GPU) recurrent tuned alone on a fresh database and benched (prefetch=1 in the
#            space), then on the same winners sweep_vs_bench.py and the recurrent sweep
# Results land flat in $OUT (the device tool brings back at most 8 files).
set -u
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
W=/tmp/h200; mkdir -p "$W"; OUT=${OUT:-$W/out}; mkdir -p "$OUT"
mkdir -p .h200; DB="sqlite:///$PWD/.h200/farm.db"
LOG="$OUT/session${PART:-1}.log"
step() { local t=$1; shift; echo "=== $(date -u +%FT%TZ) $* (limit ${t}s)" | tee -a "$LOG"
         local s=$SECONDS; timeout -s INT -k 20 "$t" "$@" 2>&1 | grep -v "Token authentication is enabled" | tee -a "$LOG"
         echo "=== rc=${PIPESTATUS[0]} in $((SECONDS - s))s" | tee -a "$LOG"; }
# Each task runs one step and copies what it wrote into $OUT as soon as it lands.
tp()       { step "$1" python3 benchmarks/throughput.py --gpus "$2" --configs "${CONFIGS:-192}" --reps 7 --out "$W/tp"
             cp "$W"/tp/*.json "$OUT"/throughput.json 2>/dev/null; }
overhead() { step "$1" python3 benchmarks/farm_overhead.py --kernel gemv --size m=4096,n=4096 --schedules 32 --out "$W/overhead"
             cp "$W"/overhead/*.json "$OUT"/overhead.json 2>/dev/null; }
probe()    { local t=$1; shift; step "$t" python3 benchmarks/ternary_probe.py "$@" --out "$W/probe"
             cp "$W"/probe/ternary_probe.json "$OUT"/ 2>/dev/null; }
tune()     { step "${TUNE_LIMIT:-$1}" python3 -m farm tune --all --gpus 1 --db "$DB" --out "$W/artifacts" ${TUNE_ARGS:-}; }
bench()    { step "$1" python3 -m farm bench --db "$DB" --out "$W/bench"
             cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null; }
sweep()    { step "$1" python3 -m farm sweep recurrent --db "$DB" --output-dir "$W/sweep"
             cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null; }
variants() { step "$1" python3 benchmarks/variants.py --out "$W/variants"
             cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null; }
overheads() { step "$1" python3 benchmarks/wgsl_overheads.py --out "$W/wo"
              cp "$W"/wo/wgsl-overheads.json "$OUT"/ 2>/dev/null; }
chunked()   { step "$1" python3 benchmarks/recurrent_chunked.py --out "$W/rch"
              cp "$W"/rch/*recurrent-chunked.json "$OUT"/ 2>/dev/null; }
calls()     { step "$1" python3 benchmarks/runtime_calls.py --out "$W/rc"
              cp "$W"/rc/runtime-calls.md "$W"/rc/runtime-calls.json "$OUT"/ 2>/dev/null; }
clock()     { step "$1" python3 benchmarks/clock_probe.py --out "$W/clock"
              cp "$W"/clock/clock-probe.json "$OUT"/ 2>/dev/null; }
overheads_small() { step "$1" python3 benchmarks/wgsl_overheads.py --groups 264 --out "$W/wo264"
                    cp "$W"/wo264/wgsl-overheads.json "$OUT"/wgsl-overheads-264.json 2>/dev/null; }
ablate()    { step "$1" python3 benchmarks/recurrent_chunked.py --ablate --no-fla --out "$W/abl" \
                --case 1,8,8,1024,64,768 --case 1,8,1,64,64,96 --case 1,8,1,64,64,768
              cp "$W"/abl/*recurrent-chunked.json "$OUT"/recurrent-ablation.json 2>/dev/null; }
recurrent() { local rdb="sqlite:///$W/recurrent.db"
              step "$1" python3 -m farm tune recurrent --gpus 1 --db "$rdb" --out "$W/artifacts"
              step "$2" python3 -m farm bench --kernels recurrent --db "$rdb" --out "$W/rbench"
              cp "$W"/rbench/bench.md "$OUT"/recurrent-bench.md; cp "$W"/rbench/bench.json "$OUT"/recurrent-bench.json
              cp "$W"/recurrent.db "$OUT"/ 2>/dev/null; }
rbench()    { step "$1" python3 -m farm bench --kernels recurrent --db "sqlite:///$PWD/${CALLS_DB:-.h200/s9a.db}" --out "$W/rbench"
              cp "$W"/rbench/bench.md "$OUT"/recurrent-bench.md; cp "$W"/rbench/bench.json "$OUT"/recurrent-bench.json; }
rsweep()    { step "$1" python3 -m farm sweep recurrent --db "sqlite:///$PWD/${CALLS_DB:-.h200/s9a.db}" --output-dir "$W/sweep"
              cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null; }
svb()        { step "$1" python3 benchmarks/sweep_vs_bench.py --db "sqlite:///$W/recurrent.db" --out "$W/svb"
               cp "$W"/svb/sweep-vs-bench.json "$OUT"/ 2>/dev/null
               step "$2" python3 -m farm sweep recurrent --long --db "sqlite:///$W/recurrent.db" --output-dir "$W/sweep"
               cp "$W"/sweep/recurrent_scaling.md "$W"/sweep/recurrent_scaling.json "$OUT"/ 2>/dev/null; }
interference() { step "$1" python3 benchmarks/trial_interference.py --out "$W/ti"
                 cp "$W"/ti/trial-interference.json "$OUT"/ 2>/dev/null; }
calls_tuned() { step "$1" python3 benchmarks/runtime_calls.py --db "sqlite:///$PWD/${CALLS_DB:-.h200/s9a.db}" --skip-costs --settle-s 4 --out "$W/rc"
                cp "$W"/rc/runtime-calls.md "$W"/rc/runtime-calls.json "$OUT"/ 2>/dev/null; }
stability() { step "$1" python3 benchmarks/stability.py --all --out "$W/stab" --label "${LABEL:-h200-s8}" --shader-cache "${SHADER_CACHE:-shared}"
              cp "$W"/stab/*-stability.json "$OUT"/ 2>/dev/null
              cp "$W"/stab/*-stability/a.db "$W"/stab/*-stability/b.db "$OUT"/ 2>/dev/null
              cp "$W"/stab/*-stability/a.log "$W"/stab/*-stability/b.log "$OUT"/ 2>/dev/null; }
rlong()      { step "$1" python3 -m farm sweep recurrent --long --db "sqlite:///$PWD/${CALLS_DB:-.h200/s12a.db}" --output-dir "$W/long"
               cp "$W"/long/recurrent_scaling.md "$OUT"/recurrent_scaling_long.md 2>/dev/null
               cp "$W"/long/recurrent_scaling.json "$OUT"/recurrent_scaling_long.json 2>/dev/null; }
trusted()    { local adb; adb=$(ls "$W"/stab/*-stability/a.db 2>/dev/null | head -1)
               step "$1" python3 benchmarks/trusted_modules.py ${adb:+--db "sqlite:///$adb"} --out "$W/tm"
               cp "$W"/tm/trusted-modules.json "$OUT"/ 2>/dev/null; }
coop()       { step "$1" python3 benchmarks/coop_gemm.py --out "$W/coop"
               cp "$W"/coop/*-coop-gemm.json "$OUT"/ 2>/dev/null; }
nvidia-smi -L | tee -a "$LOG"
case "${PART:-1}" in
  67) for base in catalog s20_catalog; do
        step 120 python3 benchmarks/ternary_parts.py --base "$base" --out "$W/tp-$base"; cp "$W"/tp-"$base"/ternary-parts.json "$OUT"/ternary-parts-"$base".json 2>/dev/null
      done ;;  # session 22: the parts again with their kernels trusted (parts 63, 65 and 66 ran them checked), on the catalog and on session 20's
  66) for v in catalog,compute_only catalog,no_dot catalog,compute_only,no_dot,compute_no_dot; do
        step 120 python3 benchmarks/ternary_parts.py --variants "$v" --out "$W/tp-$v"; cp "$W"/tp-"$v"/ternary-parts.json "$OUT"/ternary-parts-"${v//,/-}".json 2>/dev/null
      done
      step 120 python3 benchmarks/ternary_hooks.py --arms s20_catalog,catalog --out "$W/th"; cp "$W"/th/ternary-hooks.json "$OUT"/ 2>/dev/null ;;  # session 22: why part 65's parts read the catalog 13% slower than its hooks did: the parts with one variant beside the catalog, then all, SM clock and power after each row, then the hooks' two arms
  65) step 150 python3 -m farm tune ternary_gemv --gpus 1 --db "sqlite:///$W/ternary.db" --out "$W/artifacts"
      step 120 python3 -m farm bench --kernels ternary_gemv --db "sqlite:///$W/ternary.db" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null
      step 240 python3 benchmarks/ternary_hooks.py --arms s20_catalog,catalog,chain,ahead_prefetch --out "$W/th"
      cp "$W"/th/ternary-hooks.json "$OUT"/ 2>/dev/null
      step 120 python3 benchmarks/ternary_parts.py --out "$W/tparts"; cp "$W"/tparts/ternary-parts.json "$OUT"/ 2>/dev/null
      for arm in catalog chain; do
        PATH="$PWD/.devkit/zstd:$PATH" step 90 python3 benchmarks/vulkan_sass.py --out "$W/vs-$arm" --arms "$arm"
        f=$(grep -c IDP "$W"/vs-"$arm"/image*.sass | sort -t: -k2 -n | tail -1 | cut -d: -f1)
        [ -n "$f" ] && cp "$f" "$OUT"/vulkan-pass2-"$arm".sass
      done ;;  # session 22: part 64's tune and bench, and parts 62-63's measurements on the catalog of part 64 (their files were lost with session 21's checkout), in one call; the pass-2 image (most IDPs) of each SASS arm
  1) tune 330; bench 200; cp .h200/farm.db "$OUT"/farm.db ;;
  3) tune 290; tp 150 1,2; bench 130 ;;  # the short form (fits one call)
  4) tp 150 1,2; probe 90; overhead 60; tune 250 ;;  # after a worker change, and the ternary probe
  5) tp 90 1; overhead 45; tune 200; bench 130; sweep 110 ;;  # everything on a one-GPU machine
  # x2, call A; the first shape a probe times can read slow (NOTES, session 4): tall, wide, tall again
  6) tp 160 1,2; overhead 60; probe 90 --shape 65536x16384 --shape 16384x65536 --shape 65536x16384 ;;
  7) tune 220; bench 150; sweep 120 ;;  # x2, call B: tune --all on ONE of its GPUs
  8) tp 160 1,2; CUDA_VISIBLE_DEVICES=0 overhead 60; tune 210; bench 130; sweep 60 ;;  # x2, one call
  9) overhead 60; tune 240; bench 160 ;;  # session 5: after the multi-pass ternary kernel
  10) overheads 60; chunked 300; calls 200 ;;  # session 8's predictions, call 1
  11) stability 560 ;;  # session 8's predictions, call 2
  12) interference 150; calls_tuned 330 ;;  # session 9: the stability misses' cause, the fixed spin
  13) interference 120; LABEL=h200-s9 stability 420 ;;  # session 9: one-submission timed reps
  14) interference 150; calls_tuned 300 ;;  # session 9's predictions: lead-ins, stalls, recorded chains
  16) calls_tuned 300; rbench 300 ;;  # session 11: per-call costs and recurrent vs FLA on CALLS_DB's winners
  17) rsweep 200 ;;  # session 11: the sweep's fused column next to part 16's bench, same winners
  19) step 60 python3 benchmarks/sweep_vs_bench.py --db "sqlite:///$PWD/${CALLS_DB:-.h200/s11p.db}" --embd 96,192,768 --out "$W/svb"
      cp "$W"/svb/sweep-vs-bench.json "$OUT"/ 2>/dev/null ;;  # session 11: which state the sweep's slow fused column is
  22) rsweep 100; LABEL=h200-s13w stability 450 ;;  # session 13: the heater vs part 16's bench on CALLS_DB (issue 17); prefetch two ahead (issue 21; ran with FARM_WARM_ROUNDS=after-idle, an A/B since removed: NOTES)
  26) step 150 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 120 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json ;;  # session 13: fft single_buffer against cuFFT (issue 17)
  27) step 300 python3 -m farm bench --kernels recurrent --db "sqlite:///$PWD/${CALLS_DB:-.h200/s12a.db}" --out "$W/rlong" \
        --sizes "recurrent:B=1,H=8,VH=8,T=1024,L=64,E=768;recurrent:B=8,H=8,VH=8,T=1024,L=64,E=256;recurrent:B=1,H=8,VH=8,T=4096,L=64,E=768"
      cp "$W"/rlong/bench.md "$OUT"/recurrent-long-bench.md; cp "$W"/rlong/bench.json "$OUT"/recurrent-long-bench.json ;;  # session 13: the long cases alone against FLA
  28) step 120 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 100 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json
      step 300 python3 -m farm bench --kernels recurrent --db "sqlite:///$PWD/${CALLS_DB:-.h200/s12a.db}" --out "$W/rlong" \
        --sizes "recurrent:B=1,H=8,VH=8,T=1024,L=64,E=768;recurrent:B=8,H=8,VH=8,T=1024,L=64,E=256;recurrent:B=1,H=8,VH=8,T=4096,L=64,E=768"
      cp "$W"/rlong/bench.md "$OUT"/recurrent-long-bench.md; cp "$W"/rlong/bench.json "$OUT"/recurrent-long-bench.json ;;  # session 13: parts 26 and 27 in one call (a cold start costs ~100-130 s of device time)
  29) LONG="recurrent:B=1,H=8,VH=8,T=1024,L=64,E=768;recurrent:B=8,H=8,VH=8,T=1024,L=64,E=256;recurrent:B=1,H=8,VH=8,T=4096,L=64,E=768"
      step 150 python3 -m farm tune recurrent --sizes "$LONG" --gpus 1 --db "sqlite:///$W/long.db" --out "$W/artifacts"
      step 260 python3 -m farm bench --kernels recurrent --sizes "$LONG" --db "sqlite:///$W/long.db" --out "$W/rlong"
      cp "$W"/rlong/bench.md "$OUT"/recurrent-long-bench.md; cp "$W"/rlong/bench.json "$OUT"/recurrent-long-bench.json
      step 100 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 70 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json ;;  # session 14: the long cases tuned alone and benched against FLA in fp32 (TRITON_F32_DEFAULT=ieee), then fft single_buffer (parts 26/27 without s12a.db, lost with its checkout)
  30) ONE="recurrent:B=1,H=8,VH=8,T=1024,L=64,E=768"; export TRITON_PRINT_AUTOTUNING=1
      step 60 python3 -m farm tune recurrent --sizes "$ONE" --gpus 1 --db "sqlite:///$W/long.db" --out "$W/artifacts"
      cp "$W"/long.db "$OUT"/ 2>/dev/null
      step 250 python3 -m farm bench --kernels recurrent --sizes "$ONE" --db "sqlite:///$W/long.db" --out "$W/ieee"
      cp "$W"/ieee/bench.md "$OUT"/recurrent-t1024-ieee-bench.md; cp "$W"/ieee/bench.json "$OUT"/recurrent-t1024-ieee-bench.json
      step 150 python3 -m farm bench --kernels recurrent --sizes "$ONE" --vendor-fp32 tf32 --db "sqlite:///$W/long.db" --out "$W/tf32"
      cp "$W"/tf32/bench.md "$OUT"/recurrent-t1024-tf32-bench.md; cp "$W"/tf32/bench.json "$OUT"/recurrent-t1024-tf32-bench.json ;;  # session 14: part 29's bench ran out in FLA's cold autotune (ieee, its own cache): one long case, ieee then tf32, autotuning printed
  31) step 200 python3 benchmarks/fla_pinned.py --kernels recurrent --sizes "recurrent:B=1,H=8,VH=8,T=1024,L=64,E=768" \
        --db "sqlite:///$PWD/${CALLS_DB:-.h200/long30.db}" --out "$W/ieee"
      cp "$W"/ieee/bench.md "$OUT"/recurrent-t1024-ieee-bench.md; cp "$W"/ieee/bench.json "$OUT"/recurrent-t1024-ieee-bench.json ;;  # session 14: part 30's winner against FLA chunk in fp32, its autotune pinned to part 30's picks
  32) step 50 python3 benchmarks/variants.py --kernels gemm,fft --out "$W/variants"; cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
      tune 190; cp .h200/farm.db "$OUT"/farm.db 2>/dev/null
      step 320 python3 benchmarks/fla_pinned.py --db "$DB" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 15: tune --all on trusted modules, then every kernel benched in one run, FLA's fp32 autotune pinned (every issue-17 ratio)
  33) step 60 python3 benchmarks/fft_twiddles.py --out "$W/ftw"; cp "$W"/ftw/fft-twiddles.json "$OUT"/ 2>/dev/null
      step 90 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 60 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json
      LABEL=${LABEL:-h200-s15} stability 330 ;;  # session 15: fft's specialized twiddles A/B, fft tuned and benched alone, then issue 21's stability on the trusted kernels
  34) step 70 python3 benchmarks/variants.py --kernels gemm --out "$W/variants"; cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
      step 120 python3 -m farm tune gemm --gpus 1 --db "sqlite:///$W/gemm.db" --out "$W/artifacts"
      step 70 python3 -m farm bench --kernels gemm --db "sqlite:///$W/gemm.db" --out "$W/gbench"
      cp "$W"/gbench/bench.md "$OUT"/gemm-bench.md; cp "$W"/gbench/bench.json "$OUT"/gemm-bench.json ;;  # session 15: gemm double_buffer 2 (the unrolled loop) against 0 and 1 on part 32's winners, then gemm tuned and benched alone
  35) step 70 python3 benchmarks/fft_twiddles.py --out "$W/ftw"; cp "$W"/ftw/fft-twiddles.json "$OUT"/fft-twiddles-first.json 2>/dev/null
      step 100 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 60 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json
      step 70 python3 benchmarks/fft_twiddles.py --out "$W/ftw"; cp "$W"/ftw/fft-twiddles.json "$OUT"/ 2>/dev/null ;;  # session 16: fft's stage twiddle table A/B (a fresh machine's first one re-timed after), fft tuned and benched alone
  36) step 90 python3 benchmarks/variants.py --kernels gemm --match unroll --out "$W/variants"; cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
      step 150 python3 -m farm tune gemm --gpus 1 --db "sqlite:///$W/gemm.db" --out "$W/artifacts"
      step 80 python3 -m farm bench --kernels gemm --db "sqlite:///$W/gemm.db" --out "$W/gbench"
      cp "$W"/gbench/bench.md "$OUT"/gemm-bench.md; cp "$W"/gbench/bench.json "$OUT"/gemm-bench.json ;;  # session 16: gemm unroll_k A/B, then gemm tuned and benched alone
  37) step 60 python3 benchmarks/fft_twiddles.py --out "$W/ftw"; cp "$W"/ftw/fft-twiddles.json "$OUT"/ 2>/dev/null
      step 90 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 50 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json
      step 80 python3 benchmarks/variants.py --kernels gemm --match unroll --out "$W/variants"; cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
      step 130 python3 -m farm tune gemm --gpus 1 --db "sqlite:///$W/gemm.db" --out "$W/artifacts"
      step 70 python3 -m farm bench --kernels gemm --db "sqlite:///$W/gemm.db" --out "$W/gbench"
      cp "$W"/gbench/bench.md "$OUT"/gemm-bench.md; cp "$W"/gbench/bench.json "$OUT"/gemm-bench.json ;;  # session 16: parts 35 and 36 in one call (one cold start)
  38) step 60 python3 benchmarks/variants.py --kernels gemm --match s16b --out "$W/variants"; cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
      step 100 python3 -m farm tune gemm --gpus 1 --db "sqlite:///$W/gemm.db" --out "$W/artifacts"
      step 50 python3 -m farm bench --kernels gemm --db "sqlite:///$W/gemm.db" --out "$W/gbench"
      cp "$W"/gbench/bench.md "$OUT"/gemm-bench.md; cp "$W"/gbench/bench.json "$OUT"/gemm-bench.json; cp "$W"/gemm.db "$OUT"/
      step 180 python3 -m farm tune gemm --gpus 1 --budget 200 --db "sqlite:///$W/gemm200.db" --out "$W/artifacts"
      step 50 python3 -m farm bench --kernels gemm --db "sqlite:///$W/gemm200.db" --out "$W/gbench200"
      cp "$W"/gbench200/bench.md "$OUT"/gemm200-bench.md; cp "$W"/gbench200/bench.json "$OUT"/gemm200-bench.json; cp "$W"/gemm200.db "$OUT"/
      step 70 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 40 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json ;;  # session 16b: split_k with unroll_k at 1024^3, the default budget and 200, fft again
  40) step 60 python3 benchmarks/fft_twiddles.py --out "$W/ftw"; cp "$W"/ftw/fft-twiddles.json "$OUT"/ 2>/dev/null
      step 80 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      step 40 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json
      step 60 python3 benchmarks/variants.py --kernels gemm --match s16b --out "$W/variants"; cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
      step 240 python3 -m farm tune gemm --gpus 1 --strategy exhaustive --sizes "gemm:m=1024,k=1024,n=1024" --db "sqlite:///$W/gemm1024.db" --out "$W/artifacts"
      cp "$W"/gemm1024.db "$OUT"/ ;;  # session 16d: fft twiddle products A/B, fft tuned; part 38's lost variants, 1024^3's landscape (6 files: the device returns 8)
  41|44) tune 200; cp .h200/farm.db "$OUT"/farm.db 2>/dev/null
      step 300 python3 benchmarks/fla_pinned.py --db "$DB" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 16e: part 32 on session 16's kernels (every issue-17 ratio in one run); 44: session 17's polish sweep
  42|43) step 70 python3 benchmarks/variants.py --kernels gemm --match s17 --out "$W/variants"; cp "$W"/variants/variants.json "$OUT"/ 2>/dev/null
      for size in 1024 2048; do
        step 230 python3 -m farm tune gemm --gpus 1 --strategy exhaustive --sizes "gemm:m=$size,k=$size,n=$size" --db "sqlite:///$W/gemm$size.db" --out "$W/artifacts"
        cp "$W"/gemm$size.db "$OUT"/
      done ;;  # session 17: tile_k 32 at 4096^3, and the whole space at 1024^3 and 2048^3 (landscapes for replaying the search); 43 ran it with k_groups 2 in the space (commit 7c07985, reverted)
  45) tune 200; cp .h200/farm.db "$OUT"/farm.db 2>/dev/null
      step 120 python3 -m farm bench --kernels gemm fft --db "$DB" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 17: part 44's tune --all again (the sweep's second sample), gemm and fft benched
  46) step 200 python3 -m farm tune fft --gpus 1 --strategy exhaustive --sizes "fft:n=1024,batch=16384" --db "sqlite:///$W/fft1024.db" --out "$W/artifacts"
      cp "$W"/fft1024.db "$OUT"/ 2>/dev/null
      step 60 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft1024.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json
      step 90 python3 -m farm tune fft --gpus 1 --db "sqlite:///$W/fft.db" --out "$W/artifacts"
      cp "$W"/fft.db "$OUT"/ 2>/dev/null ;;  # session 18: fft's whole space at n=1024 x 16384 (a landscape for replaying the search), its best benched, then the search once on a fresh database
  47) step 90 python3 benchmarks/trial_repeat.py --db .h200/part46/fft1024.db --db .h200/part46/fft.db --out "$W/tr"
      cp "$W"/tr/trial-repeat.json "$OUT"/ 2>/dev/null
      tune 220; cp .h200/farm.db "$OUT"/farm.db 2>/dev/null
      step 300 python3 benchmarks/fla_pinned.py --db "$DB" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 18: part 46's disagreeing fft readings re-timed (carry .h200/part46), then part 44 with the two-knob sweep (every issue-17 ratio in one run)
  48) step 200 env FARM_CLOCK_TRACE=1 python3 -m farm tune fft --gpus 1 --strategy exhaustive --sizes "fft:n=1024,batch=16384" --db "sqlite:///$W/fft1024b.db" --out "$W/artifacts"
      cp "$W"/fft1024b.db "$OUT"/ 2>/dev/null
      step 120 python3 benchmarks/trial_repeat.py --db "$W"/fft1024b.db --db .h200/part46/fft1024.db --out "$W/tr"
      cp "$W"/tr/trial-repeat.json "$OUT"/ 2>/dev/null ;;  # session 18: fft's landscape again with every clock check traced, its disagreements with part 46's re-timed (carry .h200/part46)
  49) step 200 python3 -m farm tune fft --gpus 1 --strategy exhaustive --sizes "fft:n=1024,batch=16384" --db "sqlite:///$W/fft1024c.db" --out "$W/artifacts"
      cp "$W"/fft1024c.db "$OUT"/ 2>/dev/null
      step 150 python3 benchmarks/trial_repeat.py --db "$W"/fft1024c.db --db .h200/part48/fft1024b.db --out "$W/tr"
      cp "$W"/tr/trial-repeat.json "$OUT"/ 2>/dev/null ;;  # session 18: fft's landscape with re-timings behind a lead-in, retried while slow; its disagreements with part 48's re-timed (carry .h200/part48)
  50) step 120 python3 -m farm tune gemm --gpus 1 --strategy exhaustive --sizes "gemm:m=1024,k=1024,n=1024" --db "sqlite:///$W/gemm1024.db" --out "$W/artifacts"
      cp "$W"/gemm1024.db "$OUT"/ 2>/dev/null
      tune 200; cp .h200/farm.db "$OUT"/farm.db 2>/dev/null
      step 260 python3 benchmarks/fla_pinned.py --db "$DB" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 18: gemm 1024^3's landscape with the re-timing fix, then part 47 again (every ratio)
  51) step 90 python3 benchmarks/copy_widths.py --out "$W/cw"; cp "$W"/cw/copy-widths.json "$OUT"/ 2>/dev/null
      step 90 python3 benchmarks/copy_widths.py --out "$W/cw2"; cp "$W"/cw2/copy-widths.json "$OUT"/copy-widths-again.json 2>/dev/null ;;  # session 18 (to run): fft's global I/O against copies of 4-, 8- and 16-byte lanes, twice (a fresh machine's first timings re-read)
  64) step 200 python3 benchmarks/ternary_hooks.py --out "$W/th"; cp "$W"/th/ternary-hooks.json "$OUT"/ 2>/dev/null
      step 150 python3 -m farm tune ternary_gemv --gpus 1 --db "sqlite:///$W/ternary.db" --out "$W/artifacts"
      cp "$W"/ternary.db "$OUT"/ 2>/dev/null
      step 120 python3 -m farm bench --kernels ternary_gemv --db "sqlite:///$W/ternary.db" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 21: ahead on in the catalog: the A/B again against session 20's catalog, then ternary tuned and benched with it
  63) step 200 python3 benchmarks/ternary_hooks.py --out "$W/th"; cp "$W"/th/ternary-hooks.json "$OUT"/ 2>/dev/null
      step 150 python3 benchmarks/ternary_parts.py --out "$W/tparts"; cp "$W"/tparts/ternary-parts.json "$OUT"/ 2>/dev/null
      PATH="$PWD/.devkit/zstd:$PATH" step 150 python3 benchmarks/vulkan_sass.py --out "$W/vs" --arms ahead
      for f in "$W"/vs/image*.sass; do cp "$f" "$OUT"/vulkan-ahead-$(basename "$f"); done ;;  # session 21: weight vectors loaded an iteration ahead (and with the planes prefetched) against the catalog; the catalog kernel's loop without its loads or dots; the driver's SASS of ahead
  62) step 200 python3 benchmarks/ternary_hooks.py --out "$W/th"; cp "$W"/th/ternary-hooks.json "$OUT"/ 2>/dev/null
      PATH="$PWD/.devkit/zstd:$PATH" step 150 python3 benchmarks/vulkan_sass.py --out "$W/vs" --arms catalog,chain
      for f in "$W"/vs/image*.sass; do cp "$f" "$OUT"/vulkan-$(basename "$f"); done ;;  # session 21: each dot product added to its accumulator alone (chain) against the pair's sum, and the driver's SASS of both (carry the zstd binary in .devkit/zstd, Ray's wheel moved out)
  60) step 200 python3 benchmarks/ternary_hooks.py --out "$W/th"; cp "$W"/th/ternary-hooks.json "$OUT"/ 2>/dev/null ;;  # session 20: ternary's lean body unrolled 2 and 4 weight vectors a loop iteration (their loads first) against it
  59) step 300 python3 benchmarks/ternary_hooks.py --out "$W/th"; cp "$W"/th/ternary-hooks.json "$OUT"/ 2>/dev/null
      step 150 python3 -m farm tune ternary_gemv --gpus 1 --db "sqlite:///$W/ternary.db" --out "$W/artifacts"
      cp "$W"/ternary.db "$OUT"/ 2>/dev/null
      step 120 python3 -m farm bench --kernels ternary_gemv --db "sqlite:///$W/ternary.db" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 20: ternary's tile sums and lean body against the kernel before (interleaved), then ternary tuned and benched with them
  58) nvcc -O3 -arch=sm_90 -std=c++17 -Xptxas -v -o "$W/tcu" benchmarks/ternary_cuda.cu > "$OUT"/ternary-cuda-ptxas.txt 2>&1
      step 120 "$W/tcu" | tee "$OUT"/ternary-cuda.csv
      cuobjdump --dump-sass "$W/tcu" > "$W/tcu.sass" 2>&1; python3 benchmarks/sass_mix.py "$W/tcu.sass" 128,8,4,0 128,8,4,1 128,8,4,2 128,8,4,5 128,8,4,7 128,8,4,8 | tee "$OUT"/ternary-cuda-sass.txt
      step 200 ncu --clock-control none --kernel-name-base demangled -k regex:pass2 \
          --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis \
          "$W/tcu" --profile > "$OUT"/ternary-cuda-ncu.txt 2>&1; tail -5 "$OUT"/ternary-cuda-ncu.txt ;;  # session 20: ternary's stage_x=4 algorithm in CUDA C++ (variants, SASS mix, ncu): what the algorithm reaches when nvcc compiles it
  57) step 120 python3 benchmarks/gemm_guards.py --reps 100 --rounds 6 --out "$W/gg"; cp "$W"/gg/gemm-guards.json "$OUT"/ 2>/dev/null ;;  # session 19: part 56's gemm A/B with part 54's new 1024^3 leaders
  56) step 120 python3 benchmarks/gemm_guards.py --reps 100 --rounds 6 --out "$W/gg"; cp "$W"/gg/gemm-guards.json "$OUT"/ 2>/dev/null
      step 120 python3 benchmarks/fft_slots.py --reps 100 --rounds 6 --out "$W/fs"; cp "$W"/fs/fft-slots.json "$OUT"/ 2>/dev/null ;;  # session 19: part 55 with every arm trusted (parts 52-55 ran the benchmarks' own subclasses with runtime checks)
  55) step 120 python3 benchmarks/gemm_guards.py --reps 100 --rounds 6 --out "$W/gg"; cp "$W"/gg/gemm-guards.json "$OUT"/ 2>/dev/null
      step 120 python3 benchmarks/fft_slots.py --reps 100 --rounds 6 --out "$W/fs"; cp "$W"/fs/fft-slots.json "$OUT"/ 2>/dev/null ;;  # session 19: both A/Bs again with 5x the reps and an even number of rounds (part 54's 2-arm A/B led with the old kernel in 3 of 5 rounds)
  54) step 120 python3 benchmarks/gemm_guards.py --out "$W/gg"; cp "$W"/gg/gemm-guards.json "$OUT"/ 2>/dev/null
      tune 200; cp .h200/farm.db "$OUT"/farm.db 2>/dev/null
      step 260 python3 benchmarks/fla_pinned.py --db "$DB" --out "$W/bench"
      cp "$W"/bench/bench.md "$W"/bench/bench.json "$OUT"/ 2>/dev/null ;;  # session 19: gemm's trimmed bounds A/B, then tune --all and every issue-17 ratio with the folded fft slots and the trimmed gemm
  53) step 200 python3 -m farm tune fft --gpus 1 --strategy exhaustive --sizes "fft:n=1024,batch=16384" --db "sqlite:///$W/fft1024.db" --out "$W/artifacts"
      cp "$W"/fft1024.db "$OUT"/ 2>/dev/null
      step 90 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft1024.db" --out "$W/fbench"
      cp "$W"/fbench/bench.md "$OUT"/fft-bench.md; cp "$W"/fbench/bench.json "$OUT"/fft-bench.json
      step 90 python3 -m farm bench --kernels fft --db "sqlite:///$W/fft1024.db" --out "$W/fbench2"
      cp "$W"/fbench2/bench.json "$OUT"/fft-bench-again.json ;;  # session 19: fft's whole space with the folded slots (a landscape), its best benched twice against cuFFT
  52) step 90 python3 benchmarks/fft_slots.py --out "$W/fs"; cp "$W"/fs/fft-slots.json "$OUT"/ 2>/dev/null
      step 90 python3 benchmarks/fft_slots.py --out "$W/fs2"; cp "$W"/fs2/fft-slots.json "$OUT"/fft-slots-again.json 2>/dev/null ;;  # session 19: fft's folded slot arithmetic and the pad layout against the kernel before, twice
  25) rbench 250 ;;  # session 13: farm bench with the heater on CALLS_DB's winners (part 16's E96 row read slow), against part 22's sweep
  24) LABEL=${LABEL:-h200-s13i} stability 340; trusted 150 ;;  # session 13: part 23 again, the first problem's prefetch after its first trial (issue 21's second sample)
  23) LABEL=h200-s13h stability 480 ;;  # session 13: the heater in re-timings and the re-measurement's warm-up, prefetch two ahead (issue 21)
  21) coop 130; rsweep 150; rlong 240 ;;  # session 12's next: the cooperative fraction, the sweep (fresh encoders) vs part 16's bench on CALLS_DB, --long
  20) LABEL=h200-s12b stability 420; coop 130 ;;  # session 12: the competitive re-check (issue 21), the f16 cooperative-matrix GEMM (issue 17)
  18) recurrent 150 200; svb 60 240 ;;  # session 11: prefetch=1 tuned and benched; sweep vs bench, same winners
  15) clock 40; overheads 60; overheads_small 30; ablate 160; recurrent 150 110 ;;  # session 10's unrolled kernels
  *) sweep 150; CONFIGS=${CONFIGS:-288} tp 200 1,2; overhead 60; variants 90 ;;
esac
ls -la "$OUT"
