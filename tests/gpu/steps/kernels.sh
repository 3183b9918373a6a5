#!/usr/bin/env bash
# Kernel bandwidth on one GPU: the bucket copy and the checksums (a table, no gate), and the
# sparse-delta encoder against a device-to-device copy (its gate, >= 0.5 x the copy's rate,
# fails the step while missed; docs/DELTA.md has the figures).
# runner: alone (timed: the machine to itself)
source tests/gpu/lib/common.sh
gpu_step kernels "kernel bandwidth: bucket copy, checksums and the delta encoder on one GPU"
need_gpus 1
"$KERNEL_BENCH" --sizes 128,1024,4096 2>&1 | tee "$LOGS/kernels.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
cp "$LOGS/kernels.txt" "$OUT/" 2>/dev/null
end_step
