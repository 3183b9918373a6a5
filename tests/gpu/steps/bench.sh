#!/usr/bin/env bash
# The disaggregated benchmark (tests/bench/bench_update.py): Qwen2.5-7B shapes from GPU 0 to torch
# engines with SGLang semantics, one receiving rank per GPU, against the NCCL broadcast ceiling and
# torch-direct in the same run; with 4+ GPUs also 3 receiving ranks (WSYNC_BENCH_RECEIVERS sets
# the counts). Gated on the defaults row (push() and wsyncd with nothing set) against torch-direct.
# WSYNC_BENCH_ARGS adds flags; WSYNC_BENCH_VARIANTS replaces the variants (push mode with wsyncd's
# checksum and without, the defaults from a flat parameter buffer read in place).
# runner: alone (timed: the machine to itself)
source tests/gpu/lib/common.sh
gpu_step bench "benchmark: Qwen2.5-7B shapes, wsync vs torch-direct vs the NCCL ceiling"
need_gpus 2
engines=()
last=$(( ngpu >= 4 ? 3 : 1 ))
for g in $(seq 1 $last); do
  start_engine sglang $((30004 + g)) $g "$LOGS/engine$g.log" || fail=1
  engines+=("http://127.0.0.1:$((30004 + g))")
done
receivers=1
[[ $ngpu -ge 4 ]] && receivers="1 3"
# WSYNC_BENCH_RECEIVERS picks the counts (e.g. "3": only the 3-rank table).
receivers=${WSYNC_BENCH_RECEIVERS:-$receivers}
for n in $receivers; do
  urls=$(IFS=,; echo "${engines[*]:0:$n}")
  # shellcheck disable=SC2086
  timeout "${WSYNC_BENCH_TIMEOUT:-540}" python3 tests/bench/bench_update.py --wsyncd "$WSYNCD" \
    --nccl-lib "$NCCL_LIB" --engines "$urls" --python-client client/python --out "$LOGS/bench-$n" \
    --variants "${WSYNC_BENCH_VARIANTS-push=client:push;push-none=client:push --checksum none;flat=client:flat}" \
    ${WSYNC_BENCH_ARGS:-} 2>&1 | tee -a "$LOGS/bench.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  [[ -f $LOGS/bench-$n/bench.json ]] && cp "$LOGS/bench-$n/bench.json" "$OUT/bench-$n.json"
done
cp "$LOGS/bench.txt" "$OUT/" 2>/dev/null
end_step
