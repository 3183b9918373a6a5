#!/usr/bin/env bash
# One wsyncd serving an SGLang, a vLLM and an LMDeploy group at once over NCCL, their engines all
# on GPU 1 (one communicator per group, so they may share a GPU); the Qwen2 trainer pushes 3
# versions into each group, the groups in turn, every engine bit-identical each time.
source tests/gpu/lib/common.sh
gpu_step mixed_kinds "one wsyncd serving SGLang, vLLM and LMDeploy groups at once over NCCL"
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
# One trainer session per device holds its slots, so the groups are pushed in turn: two rounds
# across the three groups, 3 versions in all for each, every engine checked after each version.
for round in 1 2; do
  versions=2
  [[ $round == 2 ]] && versions=1
  for g in sgl:30081 vll:30082 lmd:30083; do
    trainer_push $sock "$log" 150 --group "${g%%:*}" --engines "http://127.0.0.1:${g##*:}" \
      --versions $versions --version-prefix "${g%%:*}-r$round-"
  done
done
ctl $sock "$log" groups
alive $d wsyncd
end_step
