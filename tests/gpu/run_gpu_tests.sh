#!/usr/bin/env bash
# Runs GPU steps (tests/gpu/steps/NAME.sh) for one device call and prints one verdict per step
# and the run's. Results and logs under $OUT. From the repo root on the GPU machine, with
# build/dev-bundle carried:
#   STEPS=ipc,vllm_nccl bash tests/gpu/run_gpu_tests.sh     # STEPS unset or "all": every step
# The bundle (built here, since the GPU machine has no gRPC/abseil):
#   cd build && ../../shared/tools/device-bundle dev-bundle daemon/wsyncd client/wsyncctl \
#     client/libwsync_client.so tests/cuda_resources_test tests/delta_codec_test tests/kernel_bench &&
#   strip --strip-unneeded dev-bundle/bin/* dev-bundle/lib/*
# Each step is also a ctest of its own (label gpu), skipped without the GPUs it needs. A step
# exits 0 (PASS), 77 (SKIP, saying why) or anything else (FAIL); a step name that does not exist
# fails the run before anything runs. WSYNC_GPU_MPS=1 runs every step under an MPS control daemon
# started (and stopped) here, so that processes sharing a GPU run kernels side by side instead of
# taking turns (docs/PERFORMANCE.md).
# WSYNC_GPU_LANES=N splits the GPUs into N lanes of equal size that take steps from one queue at
# once: each lane's steps see only its GPUs (CUDA_VISIBLE_DEVICES) and the policy steps use the
# lane's own ports, so that a 4-GPU machine runs every step in about half the time. A step that
# needs more GPUs than a lane has, and each step whose script says "# runner: alone" (the
# benchmarks), runs afterwards with the machine to itself. In a lane of 2 GPUs the policy steps
# run without their second, TP=2 engine; kill_tp and quorum_nccl still cover TP engines.
set -uo pipefail
OUT=${OUT:-/tmp/wsync-gpu-out}
export OUT
mkdir -p "$OUT"
# Everything printed lands in $OUT at once, so a run cut off by the device's time limit still
# brings back how far it got.
exec > >(tee -a "$OUT/run.log") 2>&1
# In run order: the one-GPU steps first, then those that need two GPUs, the benchmarks last.
ALL=(unit kernels one_gpu_session ipc ops quorum ipc_route ipc_lmdeploy ipc_vllm ipc_7b ipc_tp2
  trainer wheel integrations kill per_tensor memory pull dtensor mismatch lmdeploy_nccl vllm_nccl
  mixed_kinds kill_tp quorum_nccl
  ipc_bench bench bench_engines relay)
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
# A run cut off (timeout's TERM) still packs its logs; its lanes stop with it.
workers=()
trap 'kill "${workers[@]}" 2>/dev/null; exit 143' TERM INT
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

mkdir -p "$WSYNC_GPU_LOGS/verdicts"
# run_step NAME [LANE]: runs one step and writes its summary line to verdicts/NAME; in a lane the
# step's output goes to its log only (lanes run at once) and the verdict line to the screen.
run_step() {
  local s=$1 lane=${2:-} started=$SECONDS rc line note
  if [[ -n $lane ]]; then
    bash "tests/gpu/steps/$s.sh" >"$WSYNC_GPU_LOGS/$s.out" 2>&1
    rc=$?
  else
    echo
    bash "tests/gpu/steps/$s.sh" 2>&1 | tee "$WSYNC_GPU_LOGS/$s.out"
    rc=${PIPESTATUS[0]}
  fi
  case $rc in
    0) line="PASS" ;;
    77) line="SKIP: $(grep -m1 '^SKIP: ' "$WSYNC_GPU_LOGS/$s.out" | cut -c7-)" ;;
    *) line="FAIL (exit $rc)" ;;
  esac
  note=$(grep -m1 "^STEP $s: " "$WSYNC_GPU_LOGS/$s.out" | sed -E "s/^STEP $s: (PASS|FAIL) ?//")
  line=$(printf '%-16s %-6s %s%s' "$s" "$((SECONDS - started)) s" "$line" "${note:+ $note}")
  echo "$line" >"$WSYNC_GPU_LOGS/verdicts/$s"
  [[ -n $lane ]] && echo "[lane $lane: GPUs $CUDA_VISIBLE_DEVICES] $line"
  return 0
}
# The GPUs a step needs: its need_gpus, or 2 for the policy steps (tests/gpu/lib/policy.sh).
step_gpus() {
  local f=tests/gpu/steps/$1.sh n=1 m
  grep -q '^start_policy' "$f" && n=2
  m=$(grep -oE '^need_gpus [0-9]+' "$f" | awk '{print $2}' | sort -n | tail -1)
  [[ -n $m && $m -gt $n ]] && n=$m
  echo "$n"
}
# lane_worker LANE GPUS QUEUE: takes steps from the queue (a file of names, one taken at a time
# under its lock) until it is empty.
lane_worker() {
  export WSYNC_GPU_LANE=$1 CUDA_VISIBLE_DEVICES=$2
  local q=$3 s
  while :; do
    s=$(flock "$q.lock" bash -c 'head -1 "$1"; sed -i 1d "$1"' _ "$q")
    [[ -n $s ]] || return 0
    run_step "$s" "$1"
  done
}

lanes=${WSYNC_GPU_LANES:-1}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
alone=("${selected[@]}")
if [[ $lanes -gt 1 ]]; then
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -ra gpus <<<"$CUDA_VISIBLE_DEVICES"
  else
    mapfile -t gpus < <(seq 0 $((ngpu - 1)))
  fi
  per=$((${#gpus[@]} / lanes))
  if [[ $per -lt 1 ]]; then
    echo "WSYNC_GPU_LANES=$lanes: this machine has ${#gpus[@]} GPU(s), fewer than one a lane"
    echo "GPU RESULT: FAIL (WSYNC_GPU_LANES=$lanes with ${#gpus[@]} GPU(s))"
    exit 2
  fi
  queue=$WSYNC_GPU_LOGS/queue
  : >"$queue"
  alone=()
  for s in "${selected[@]}"; do
    if grep -q '^# runner: alone' "tests/gpu/steps/$s.sh" || [[ $(step_gpus "$s") -gt $per ]]; then
      alone+=("$s")
    else
      echo "$s" >>"$queue"
    fi
  done
  echo "$lanes lanes of $per GPU(s): $(wc -l <"$queue") steps; afterwards alone: ${alone[*]:-none}"
  for ((l = 0; l < lanes; l++)); do
    lane_gpus=$(IFS=,; echo "${gpus[*]:$((l * per)):$per}")
    lane_worker "$l" "$lane_gpus" "$queue" &
    workers+=($!)
  done
  wait "${workers[@]}"
fi
for s in "${alone[@]}"; do run_step "$s"; done
echo
echo "# step            time   verdict"
for s in "${selected[@]}"; do
  cat "$WSYNC_GPU_LOGS/verdicts/$s" 2>/dev/null || printf '%-16s %-6s %s\n' "$s" "-" "FAIL (no verdict)"
done | tee "$OUT/steps.txt"
failed=0
grep -qE '^\S+ +(-|[0-9]+ s) +FAIL' "$OUT/steps.txt" && failed=1
echo "GPU RESULT: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL) ($ngpu GPU(s))"
exit $failed
