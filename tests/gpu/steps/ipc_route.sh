#!/usr/bin/env bash
# Colocated over SGLang's map-once route (--sglang-ipc-route ipc): one POST
# /update_weights_from_ipc per update, during which the engine rank runs checkpoint-engine's
# worker over ZMQ (tests/sim/checkpoint_engine_worker.py with real torch, libzmq through ctypes
# from wsyncd's bundle): it maps wsyncd's slot allocation once per update and loads each bucket
# from its byte offsets. 3 versions from the slots and 2 zero-copy from the trainer's flat
# buffer, bit-identical; the older worker generation (post-processing at the first None); an
# engine killed at its 2nd bucket fails the update naming it, and a fresh one takes the next.
source tests/gpu/lib/common.sh
gpu_step ipc_route "colocated, SGLang map-once route: wsyncd (cuda) + torch engine + Qwen2 trainer on GPU 0"
need_gpus 1
sock=/tmp/wsync-gpu-route.sock
url=http://127.0.0.1:30031
log=$LOGS/ipc-route.log
# Slots above the largest tensor (the route maps one allocation per update), below the model
# (0.21 GiB), so that an update has several buckets.
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 128MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
push() { trainer_push $sock "$log" 150 --group route --engines $url "$@"; }
start_engine sglang 30031 0 "$LOGS/engine.log" || fail=1
ctl $sock "$log" create-group route --transport ipc --sglang-ipc-route ipc \
  --engine "$url@GPU-$(gpu_uuid 0)"
push --versions 3 --version-prefix route-
push --versions 2 --pull --flat --version-prefix route-zero-copy-
ctl $sock "$log" engines
stop_pids $engine_pid
start_engine sglang 30031 0 "$LOGS/engine.log" --ce-worker g1 || fail=1
push --versions 2 --version-prefix route-g1-
stop_pids $engine_pid
start_engine sglang 30031 0 "$LOGS/engine.log" --die-at-update 1 || fail=1
push --versions 1 --version-prefix route-killed- --expect-failure 30031
stop_pids $engine_pid
start_engine sglang 30031 0 "$LOGS/engine.log" || fail=1
push --versions 2 --version-prefix route-after-
alive $d wsyncd
grep -h "RESULT" "$log"
end_step
