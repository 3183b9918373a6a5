#!/usr/bin/env bash
# vLLM and LMDeploy end to end over NCCL (tests/bench/engine_designs_bench.py): wsync beside each
# engine's own trainer-side design (the trainer process as rank 0, as their examples do), the
# Qwen2.5-7B shapes, in the same run on the same GPUs. Reported, not gated; WSYNC_DESIGNS_ARGS adds
# flags.
# runner: alone (timed: the machine to itself)
source tests/gpu/lib/common.sh
gpu_step bench_engines "vLLM and LMDeploy: wsync beside their own trainer-side designs"
need_gpus 2
# shellcheck disable=SC2086
timeout "${WSYNC_BENCH_TIMEOUT:-540}" python3 tests/bench/engine_designs_bench.py \
  --wsyncd "$WSYNCD" --nccl-lib "$NCCL_LIB" --python-client client/python \
  --out "$LOGS/designs" ${WSYNC_DESIGNS_ARGS:-} 2>&1 | tee "$LOGS/bench-engines.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
cp "$LOGS/bench-engines.txt" "$OUT/" 2>/dev/null
[[ -f $LOGS/designs/designs.json ]] && cp "$LOGS/designs/designs.json" "$OUT/bench-engines.json"
end_step
