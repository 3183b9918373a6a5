#!/usr/bin/env bash
# The framework integrations (wsync.integrations) with torch engines: slime's distributed updater
# and verl's `wsync` checkpoint-engine backend into an engine on GPU 1 over NCCL, slime's tensor
# updater into a colocated engine on GPU 0 over CUDA IPC; a Qwen2 model on GPU 0, 3 versions each,
# bit-identical on every rank. On one GPU only the colocated part runs (NCCL refuses two ranks on
# one device); the step says so, and the NCCL parts count as not run.
source tests/gpu/lib/common.sh
gpu_step integrations "slime and verl integrations: wsyncd (cuda) + torch engines + Qwen2 trainer"
need_gpus 1
lane=${WSYNC_GPU_LANE:-0}
sock=/tmp/wsync-gpu-integrations$lane.sock
far=$((30041 + 1000 * lane)) near=$((30042 + 1000 * lane))
log=$LOGS/integrations.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
[[ $ngpu -ge 2 ]] && { start_engine sglang $far 1 "$LOGS/engine-far.log" || fail=1; }
start_engine sglang $near 0 "$LOGS/engine-near.log" || fail=1
run() {
  timeout 150 python3 tests/gpu/integrations_push.py --socket $sock --python-client client/python \
    "$@" 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "FAILED: integrations_push $*"; fail=1; }
}
# slime's distributed updater ends its group when it disconnects, so verl's backend can then
# declare its own on the same engine.
if [[ $ngpu -ge 2 ]]; then
  run --framework slime-distributed --engine http://127.0.0.1:$far --ranks 1
  run --framework verl --engine http://127.0.0.1:$far --ranks 1
else
  echo "NOT RUN: slime-distributed and verl over NCCL need 2 GPUs, this machine has $ngpu" |
    tee -a "$log"
fi
run --framework slime-tensor --engine http://127.0.0.1:$near --ranks 1
ctl $sock "$log" updates
alive $d wsyncd
end_step
