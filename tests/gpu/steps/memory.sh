#!/usr/bin/env bash
# 20 consecutive updates: wsyncd's GPU memory stays flat (the trainer watches its pid).
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step memory "20 consecutive updates: wsyncd's GPU memory stays flat"
start_policy
policy_push memory.log 180 --versions 20 --version-prefix flat- --watch-pid "$policy_wsyncd" \
  --verify-every 5
alive $policy_wsyncd wsyncd
end_step
