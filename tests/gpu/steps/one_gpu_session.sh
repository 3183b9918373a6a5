#!/usr/bin/env bash
# What one GPU can show of the broadcast side (NCCL refuses two ranks of one communicator on one
# GPU): wsyncd in CUDA mode serving a trainer's session, its slots mapped into the trainer process
# through CUDA IPC.
source tests/gpu/lib/common.sh
gpu_step one_gpu_session "wsyncd (cuda) serves a Python trainer session over CUDA IPC"
need_gpus 1
sock=/tmp/wsync-gpu-session.sock
log=$LOGS/session.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB || fail=1
ctl $sock "$log" status
timeout 60 python3 - "$sock" <<'PY' 2>&1 | tee -a "$log"
import sys
sys.path.insert(0, "client/python")
import wsync
c = wsync.Client("unix:" + sys.argv[1], device=0, name="one-gpu smoke")
print("session open, slot bytes", c.slot_bytes)
assert c.slot_bytes == 64 << 20
c.close()
print("ONE-GPU SESSION OK")
PY
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
ctl $sock "$log" buffers
end_step
