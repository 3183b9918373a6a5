#!/usr/bin/env bash
# The per-tensor format (load_format null): one typed broadcast per tensor, bit-identical.
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step per_tensor "per-tensor format (load_format null): one typed broadcast per tensor"
start_policy --load-format per_tensor
policy_push per-tensor.log 120 --versions 3 --version-prefix per-tensor-
alive $policy_wsyncd wsyncd
end_step
