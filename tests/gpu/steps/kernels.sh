#!/usr/bin/env bash
# Kernel bandwidth on one GPU: the bucket copy and the checksums (a table, no gate).
# runner: alone (timed: the machine to itself)
source tests/gpu/lib/common.sh
gpu_step kernels "kernel bandwidth: bucket copy and checksums on one GPU"
need_gpus 1
"$KERNEL_BENCH" --sizes 128,1024,4096 2>&1 | tee "$LOGS/kernels.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
cp "$LOGS/kernels.txt" "$OUT/" 2>/dev/null
end_step
