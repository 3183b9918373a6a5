#!/usr/bin/env bash
# The CUDA resource tests (RAII of every CUDA/NCCL resource, the kernels' bytes, two NCCL
# libraries side by side) and the GPU delta encoder's on this machine's GPUs; where the machine has cuobjdump, the
# architectures the build machine's fat-binary reader finds in wsyncd and kernel_bench are
# checked against cuobjdump's --list-elf and --list-ptx.
source tests/gpu/lib/common.sh
gpu_step unit "GPU unit tests (cuda_resources_test, delta_codec_test)"
need_gpus 1
# The second NCCL of the per-group test: torch's copy beside the loader's libnccl.so.2.
WSYNC_SECOND_NCCL="$NCCL_LIB" "$CUDA_RESOURCES_TEST" 2>&1 | tee "$LOGS/cuda_resources_test.log" |
  tail -8
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
# The GPU delta encoder writes the CPU codec's frames byte for byte.
"$DELTA_CODEC_TEST" 2>&1 | tee "$LOGS/delta_codec_test.log" | tail -4
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if [[ -x $cuobjdump ]]; then
  for bin in "$WSYNCD" "$KERNEL_BENCH"; do
    ours=$(python3 tests/packaging/cuda_architectures_test.py --list "$bin")
    # One file per call: cuobjdump prints its usage when given two.
    elf=$("$cuobjdump" --list-elf "$bin" | grep -oE 'sm_[0-9]+' | tr -d 'sm_' | sort -un | xargs)
    ptx=$("$cuobjdump" --list-ptx "$bin" | grep -oE '(sm|compute)_[0-9]+' | grep -oE '[0-9]+$' |
      sort -un | xargs)
    echo "$bin: fat-binary reader: $ours; cuobjdump: elf $elf; ptx $ptx"
    [[ $ours == "elf $elf; ptx $ptx" ]] ||
      { echo "FAILED: the fat-binary reader and cuobjdump disagree on $bin"; fail=1; }
  done
else
  echo "no cuobjdump on this machine: the architectures' cross-check did not run"
fi
end_step
