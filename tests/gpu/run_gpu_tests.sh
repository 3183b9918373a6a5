#!/usr/bin/env bash
# Runs GPU steps (tests/gpu/steps/NAME.sh) for one device call and prints one verdict per step
# and the run's. Results and logs under $OUT. From the repo root on the GPU machine, with
# build/dev-bundle carried:
#   STEPS=ipc,vllm_nccl bash tests/gpu/run_gpu_tests.sh     # STEPS unset or "all": every step
# The bundle (built here, since the GPU machine has no gRPC/abseil):
#   cd build && ../../shared/tools/device-bundle dev-bundle daemon/wsyncd client/wsyncctl \
#     client/libwsync_client.so tests/cuda_resources_test tests/kernel_bench &&
#   strip --strip-unneeded dev-bundle/bin/* dev-bundle/lib/*
# Each step is also a ctest of its own (label gpu), skipped without the GPUs it needs. A step
# exits 0 (PASS), 77 (SKIP, saying why) or anything else (FAIL); a step name that does not exist
# fails the run before anything runs. WSYNC_GPU_MPS=1 runs every step under an MPS control daemon
# started (and stopped) here, so that processes sharing a GPU run kernels side by side instead of
# taking turns (docs/PERFORMANCE.md).
set -uo pipefail
OUT=${OUT:-/tmp/wsync-gpu-out}
export OUT
mkdir -p "$OUT"
# Everything printed lands in $OUT at once, so a run cut off by the device's time limit still
# brings back how far it got.
exec > >(tee -a "$OUT/run.log") 2>&1
# In run order: the one-GPU steps first, then those that need two GPUs, the benchmarks last.
ALL=(unit kernels one_gpu_session ipc ops quorum ipc_route ipc_lmdeploy ipc_vllm ipc_7b ipc_tp2
  trainer kill per_tensor memory pull dtensor mismatch lmdeploy_nccl vllm_nccl mixed_kinds
  kill_tp quorum_nccl
  ipc_bench bench bench_engines)
selected=()
if [[ ${STEPS:-all} == all ]]; then
  selected=("${ALL[@]}")
else
  IFS=, read -ra selected <<<"$STEPS"
  for s in "${selected[@]}"; do
    if [[ ! -f tests/gpu/steps/$s.sh ]]; then
      echo "unknown step '$s'; the steps: ${ALL[*]}"
      echo "GPU RESULT: FAIL (unknown step '$s')"
      exit 2
    fi
  done
fi
export WSYNC_GPU_LOGS
WSYNC_GPU_LOGS=$(mktemp -d /tmp/wsync-gpu-logs.XXXXXX)
collect() { tar czf "$OUT/logs.tgz" -C "$WSYNC_GPU_LOGS" . 2>/dev/null; }
trap collect EXIT
# A run cut off (timeout's TERM) still packs its logs.
trap 'exit 143' TERM INT
if [[ ${WSYNC_GPU_MPS:-0} == 1 ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=$WSYNC_GPU_LOGS/mps-pipe CUDA_MPS_LOG_DIRECTORY=$WSYNC_GPU_LOGS/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "nvidia-cuda-mps-control failed"; exit 1; }
  stop_mps() { echo quit | nvidia-cuda-mps-control; collect; }
  trap stop_mps EXIT
  echo "MPS control daemon started (pipe $CUDA_MPS_PIPE_DIRECTORY)"
fi

{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/machine.txt"

summary=()
failed=0
for s in "${selected[@]}"; do
  echo
  started=$SECONDS
  bash "tests/gpu/steps/$s.sh" 2>&1 | tee "$WSYNC_GPU_LOGS/$s.out"
  rc=${PIPESTATUS[0]}
  took="$((SECONDS - started)) s"
  case $rc in
    0) line="PASS" ;;
    77) line="SKIP: $(grep -m1 '^SKIP: ' "$WSYNC_GPU_LOGS/$s.out" | cut -c7-)" ;;
    *) line="FAIL (exit $rc)"; failed=1 ;;
  esac
  note=$(grep -m1 "^STEP $s: " "$WSYNC_GPU_LOGS/$s.out" | sed -E "s/^STEP $s: (PASS|FAIL) ?//")
  summary+=("$(printf '%-16s %-6s %s%s' "$s" "$took" "$line" "${note:+ $note}")")
done
echo
echo "# step            time   verdict"
printf '%s\n' "${summary[@]}" | tee "$OUT/steps.txt"
echo "GPU RESULT: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL) ($(nvidia-smi -L 2>/dev/null | wc -l) GPU(s))"
exit $failed
