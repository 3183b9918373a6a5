#!/usr/bin/env bash
# LMDeploy over NCCL (PR #4638): wsyncd in CUDA mode on GPU 0 as rank 0, LMDeploy's simulator
# (tests/engines/lmdeploy/lmdeploy_engine.py on GPU memory) with its rank on GPU 1 joining through
# wsyncd's TCPStore (SGLang's helper, ProcessGroupNCCL without device_id), fed by the Qwen2
# trainer. Flattened buckets
# (one dtype each, one element-typed broadcast) and per tensor, 3 versions each, bit-identical; an
# engine killed at its 2nd bucket fails the update naming it, and a fresh one joins the group
# formed again for the next.
source tests/gpu/lib/common.sh
gpu_step lmdeploy_nccl "LMDeploy over NCCL: wsyncd (cuda, GPU 0) + LMDeploy torch engine (GPU 1) + Qwen2 trainer"
need_gpus 2
sock=/tmp/wsync-gpu-lmdeploy-nccl.sock
url=http://127.0.0.1:30052
log=$LOGS/lmdeploy-nccl.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
engine() { start_engine lmdeploy 30052 1 "$LOGS/engine.log" --no-digest-log "$@"; }
push() { trainer_push $sock "$log" 150 --group "$1" --engines $url --version-prefix "$1-" "${@:2}"; }
engine || fail=1
for format in flattened_bucket per_tensor; do
  ctl $sock "$log" create-group "lmd-$format" --kind lmdeploy --load-format "$format" \
    --engine "$url"
  push "lmd-$format" --versions 3
  ctl $sock "$log" destroy-group "lmd-$format"
done
ctl $sock "$log" create-group lmd --kind lmdeploy --engine "$url"
stop_pids $engine_pid
engine --die-at-update 1 || fail=1
push lmd --versions 1 --version-prefix lmd-killed- --expect-failure 30052
stop_pids $engine_pid
engine || fail=1
push lmd --versions 2 --version-prefix lmd-after-
alive $d wsyncd
grep -h "RESULT" "$log"
end_step
