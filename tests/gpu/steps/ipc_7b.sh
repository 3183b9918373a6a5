#!/usr/bin/env bash
# The SGLang colocated path at 7B size: Qwen2.5-7B's 339 bf16 tensors (14.19 GiB, random) pushed
# 3 times through wsyncd into SGLang's simulator on GPU 0, bit-identical each time.
# The trainer, the engine's copy and wsyncd's slots need about 40 GiB of GPU 0.
source tests/gpu/lib/common.sh
gpu_step ipc_7b "colocated (ipc) at 7B size: Qwen2.5-7B shapes through wsyncd into the SGLang torch engine"
need_gpus 1
need_free_mib 40960 0
sock=/tmp/wsync-gpu-7b.sock
url=http://127.0.0.1:30041
log=$LOGS/ipc-7b.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 512MiB --bucket-timeout 120 || fail=1
d=$wsyncd_pid
start_engine sglang 30041 0 "$LOGS/engine.log" || fail=1
ctl $sock "$log" create-group colo-7b --transport ipc --engine "$url@GPU-$(gpu_uuid 0)"
trainer_push $sock "$log" 420 --group colo-7b --engines $url --version-prefix 7b- --versions 3 \
  --model qwen2.5-7b-shapes
nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1 | tee -a "$log"
alive $d wsyncd
note=$(grep -h "^version 7b-" "$log" |
  sed -E 's/.*: ([0-9]+) buckets.* in ([0-9.]+) s.*/\1 buckets \2 s/' | paste -sd';' -)
end_step "$note"
