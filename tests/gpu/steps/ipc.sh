#!/usr/bin/env bash
# Colocated: wsyncd, the Qwen2 trainer and a torch engine rank share GPU 0. The engine loads every
# bucket from wsyncd's slots through CUDA IPC, as SGLang's update_weights_from_tensor does (exact-
# name unpickler, the GPU named by UUID); both load formats, zero copy from a flat buffer, then an
# engine killed mid-update fails the update naming it and a fresh one takes the next.
source tests/gpu/lib/common.sh
gpu_step ipc "colocated (ipc): wsyncd (cuda) + torch engine + Qwen2 trainer on GPU 0"
need_gpus 1
sock=/tmp/wsync-gpu-ipc.sock
log=$LOGS/ipc.log
url=http://127.0.0.1:30011
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
start_engine sglang 30011 0 "$LOGS/engine.log" || fail=1
uuid=$(gpu_uuid 0)
echo "GPU 0 UUID $uuid" | tee "$log"
push() { trainer_push $sock "$log" 150 --group "$1" --engines $url --version-prefix "$1-" "${@:2}"; }
for format in flattened_bucket per_tensor; do
  ctl $sock "$log" create-group "colo-$format" --transport ipc --load-format "$format" \
    --engine "$url@GPU-$uuid"
  push "colo-$format" --versions 3
done
# Zero copy: parameters in one flat buffer, pulled; every request names that buffer, and the
# engine reads each bucket there (the trainer checks every bucket was read in place).
push colo-flattened_bucket --versions 2 --pull --flat --version-prefix zero-copy-
# Left to the group: wsyncd pulls the buckets that lie in one allocation, the client copies the
# others. Fresh copies of the parameters each version, which the client must stop holding (with
# wsyncd's mappings) once the trainer drops them.
push colo-flattened_bucket --versions 2 --temporaries --expect-pulled one-allocation \
  --version-prefix temporaries-
ctl $sock "$log" group colo-flattened_bucket
# An engine that dies at its 2nd bucket: the update fails naming it, wsyncd stays up, and the
# next update into a fresh engine on the same port succeeds.
stop_pids $engine_pid
start_engine sglang 30011 0 "$LOGS/engine-dies.log" --die-at-update 1 || fail=1
push colo-flattened_bucket --versions 1 --expect-failure "30011"
stop_pids $engine_pid
start_engine sglang 30011 0 "$LOGS/engine2.log" || fail=1
push colo-flattened_bucket --versions 2
alive $d wsyncd
grep -h "RESULT" "$log"
end_step
