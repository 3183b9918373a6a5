#!/usr/bin/env bash
# Colocated with TP=2: one engine whose two TP ranks are on GPUs 0 and 1, fed by two trainer
# ranks, one per GPU, each filling wsyncd's slots on its own GPU; wsyncd joins their sessions into
# one update and each engine rank loads from the slots of its GPU. Every rank must hold every
# tensor bit-identical, for 3 versions.
source tests/gpu/lib/common.sh
gpu_step ipc_tp2 "colocated TP=2: two trainer ranks on GPUs 0 and 1, one engine with a rank on each"
need_gpus 2
sock=/tmp/wsync-gpu-tp2.sock
log=$LOGS/ipc-tp2.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
start_engine sglang 30071 0,1 "$LOGS/engine.log" || fail=1
ctl $sock "$log" create-group tp2 --transport ipc \
  --engine "http://127.0.0.1:30071@GPU-$(gpu_uuid 0),GPU-$(gpu_uuid 1)"
trainers=()
for rank in 0 1; do
  timeout 200 python3 tests/gpu/trainer_push.py --socket $sock --group tp2 \
    --engines http://127.0.0.1:30071 --python-client client/python --versions 3 \
    --version-prefix tp2- --device $rank --tp-rank $rank >"$LOGS/trainer$rank.log" 2>&1 &
  trainers+=($!)
done
for rank in 0 1; do
  wait "${trainers[$rank]}" || { echo "trainer rank $rank failed"; fail=1; }
  tee -a "$log" <"$LOGS/trainer$rank.log"
done
alive $d wsyncd
end_step
