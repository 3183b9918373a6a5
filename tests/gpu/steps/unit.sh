#!/usr/bin/env bash
# The CUDA resource tests (RAII of every CUDA/NCCL resource, the kernels' bytes, two NCCL
# libraries side by side) on this machine's GPUs.
source tests/gpu/lib/common.sh
gpu_step unit "GPU unit tests (cuda_resources_test)"
need_gpus 1
# The second NCCL of the per-group test: torch's copy beside the loader's libnccl.so.2.
WSYNC_SECOND_NCCL="$NCCL_LIB" "$CUDA_RESOURCES_TEST" 2>&1 | tee "$LOGS/cuda_resources_test.log" |
  tail -8
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
end_step
