#!/usr/bin/env bash
# DTensors: the Python client gathers each with full_tensor() before pushing it.
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step dtensor "DTensors: the Python client gathers each with full_tensor()"
start_policy
policy_push dtensor.log 120 --versions 2 --version-prefix dtensor- --dtensor
alive $policy_wsyncd wsyncd
end_step
