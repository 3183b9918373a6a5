#!/usr/bin/env bash
# Disaggregated: wsyncd (CUDA, GPU 0) as NCCL rank 0 of a torch engine's ranks on the other GPUs,
# fed by a transformers Qwen2 trainer over CUDA IPC; 3 versions bit-identical on every rank.
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step trainer "wsyncd (cuda) + torch engine(s) + Qwen2 trainer, over NCCL"
start_policy
policy_push trainer.log 150 --versions 3
ctl $policy_sock "$LOGS/trainer.log" updates
alive $policy_wsyncd wsyncd
end_step
