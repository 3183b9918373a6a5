#!/usr/bin/env bash
# One wsyncd serving an SGLang, a vLLM and an LMDeploy group at once over NCCL, their engines all
# on GPU 1 (one communicator per group, so they may share a GPU); three Qwen2 trainers push 3
# versions into their groups side by side, every engine bit-identical each time.
source tests/gpu/lib/common.sh
gpu_step mixed_kinds "one wsyncd, SGLang + vLLM + LMDeploy groups updated at once over NCCL"
need_gpus 2
sock=/tmp/wsync-gpu-mixed.sock
log=$LOGS/mixed.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 90 || fail=1
d=$wsyncd_pid
start_engine sglang 30081 1 "$LOGS/sglang.log" || fail=1
start_engine vllm_nccl 30082 1 "$LOGS/vllm.log" || fail=1
start_engine lmdeploy 30083 1 "$LOGS/lmdeploy.log" --no-digest-log || fail=1
ctl $sock "$log" create-group sgl --kind sglang --engine http://127.0.0.1:30081#1
ctl $sock "$log" create-group vll --kind vllm --transport broadcast --engine http://127.0.0.1:30082
ctl $sock "$log" create-group lmd --kind lmdeploy --engine http://127.0.0.1:30083
trainers=()
for g in sgl:30081 vll:30082 lmd:30083; do
  timeout 240 python3 tests/gpu/trainer_push.py --socket $sock --group "${g%%:*}" \
    --engines "http://127.0.0.1:${g##*:}" --python-client client/python --versions 3 \
    --version-prefix "${g%%:*}-" >"$LOGS/trainer-${g%%:*}.log" 2>&1 &
  trainers+=($!)
done
for k in 0 1 2; do
  wait "${trainers[$k]}" || { echo "trainer $k failed"; fail=1; }
done
cat "$LOGS"/trainer-*.log | tee -a "$log"
ctl $sock "$log" groups
alive $d wsyncd
end_step
