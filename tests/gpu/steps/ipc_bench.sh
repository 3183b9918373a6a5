#!/usr/bin/env bash
# The colocated benchmark (tests/bench/ipc_bench.py): Qwen2.5-7B shapes on GPU 0 against the
# one-copy ceiling and the peers' design, gated on the defaults row; WSYNC_IPC_BENCH_ARGS adds flags.
# runner: alone (timed: the machine to itself)
source tests/gpu/lib/common.sh
gpu_step ipc_bench "colocated benchmark: Qwen2.5-7B shapes, the defaults against the peers' design"
need_gpus 1
# shellcheck disable=SC2086
timeout "${WSYNC_BENCH_TIMEOUT:-540}" python3 tests/bench/ipc_bench.py --gate --wsyncd "$WSYNCD" \
  --nccl-lib "$NCCL_LIB" --python-client client/python --out "$LOGS/bench-ipc" \
  ${WSYNC_IPC_BENCH_ARGS:-} 2>&1 | tee "$LOGS/ipc-bench.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
cp "$LOGS/ipc-bench.txt" "$OUT/" 2>/dev/null
[[ -f $LOGS/bench-ipc/bench.json ]] && cp "$LOGS/bench-ipc/bench.json" "$OUT/bench-ipc.json"
end_step
