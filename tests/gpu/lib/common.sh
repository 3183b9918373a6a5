# shellcheck shell=bash
# What every GPU step shares: the binaries, NCCL's library, waiting for processes, starting
# wsyncd and engines, and the step's verdict. Sourced by tests/gpu/steps/*.sh, which run from the
# repository root:
#   source tests/gpu/lib/common.sh
#   gpu_step NAME "what it shows"   # logs under $LOGS, verdict by end_step
#   need_gpus 2                     # fewer: exits 77 (skipped) saying why
#   ...                             # fail=1 marks the step failed and it goes on
#   end_step                        # exits 0 (PASS) or 1 (FAIL)
# Binaries: build/dev-bundle (../shared/tools/device-bundle; the device has no gRPC/abseil), else
# $WSYNC_BUILD_DIR's (a machine that built wsync itself).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/wsync-gpu-out}
mkdir -p "$OUT"

if [[ -x build/dev-bundle/bin/wsyncd ]]; then
  B=build/dev-bundle
  export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
  WSYNCD=$B/bin/wsyncd WSYNCCTL=$B/bin/wsyncctl
  export WSYNC_CLIENT_LIB=$PWD/$B/bin/libwsync_client.so
  CUDA_RESOURCES_TEST=$B/bin/cuda_resources_test KERNEL_BENCH=$B/bin/kernel_bench
  DELTA_CODEC_TEST=$B/bin/delta_codec_test
elif [[ -n ${WSYNC_BUILD_DIR:-} && -x $WSYNC_BUILD_DIR/daemon/wsyncd ]]; then
  WSYNCD=$WSYNC_BUILD_DIR/daemon/wsyncd WSYNCCTL=$WSYNC_BUILD_DIR/client/wsyncctl
  export WSYNC_CLIENT_LIB=$WSYNC_BUILD_DIR/client/libwsync_client.so
  CUDA_RESOURCES_TEST=$WSYNC_BUILD_DIR/tests/cuda_resources_test
  KERNEL_BENCH=$WSYNC_BUILD_DIR/tests/kernel_bench
  DELTA_CODEC_TEST=$WSYNC_BUILD_DIR/tests/delta_codec_test
else
  echo "FAIL: no wsyncd: carry build/dev-bundle (tests/gpu/run_gpu_tests.sh says how to make it)"
  echo "or set WSYNC_BUILD_DIR to a build directory"
  exit 1
fi
NCCL_LIB=${NCCL_LIB:-$(python3 -c "import glob,os,torch; print(glob.glob(os.path.dirname(torch.__file__)+'/../nvidia/nccl/lib/libnccl.so*')[0])" 2>/dev/null)}
# The GPUs this step may use: CUDA_VISIBLE_DEVICES's (a runner lane's) when set, else every one.
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
  IFS=, read -ra visible_gpus <<<"$CUDA_VISIBLE_DEVICES"
  ngpu=${#visible_gpus[@]}
else
  ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
  mapfile -t visible_gpus < <(seq 0 $((ngpu - 1)))
fi
fail=0
# Every pid a step starts through these helpers, stopped when the step ends however it ends.
started_pids=()

# gpu_step NAME TITLE: the step's log folder ($LOGS, under the runner's $WSYNC_GPU_LOGS or a
# fresh one) and its header.
gpu_step() {
  step_name=$1
  LOGS=${WSYNC_GPU_LOGS:-$(mktemp -d /tmp/wsync-gpu-logs.XXXXXX)}/$1
  mkdir -p "$LOGS"
  trap stop_started EXIT
  echo "=== $1: $2"
}
# need_gpus N: skips the step (exit 77) on a machine with fewer GPUs.
need_gpus() {
  if [[ $ngpu -lt $1 ]]; then
    echo "SKIP: needs $1 GPUs, this machine has $ngpu"
    exit 77
  fi
}
# need_free_mib MIB [GPU]: skips the step when the GPU (CUDA's index, as torch numbers it) has less
# memory free.
need_free_mib() {
  local free
  free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits \
    -i "${visible_gpus[${2:-0}]}" | head -1)
  if [[ -z $free || $free -lt $1 ]]; then
    echo "SKIP: GPU ${2:-0} has ${free:-?} MiB free, the step needs $1"
    exit 77
  fi
}
# end_step [NOTE]: exits with the step's verdict, printed as the runner's summary reads it.
end_step() {
  echo "STEP $step_name: $([[ $fail -eq 0 ]] && echo PASS || echo FAIL)${1:+ ($1)}"
  exit "$fail"
}
# check CMD...: runs a command, marking the step failed when it fails.
check() { "$@" || { echo "FAILED: $*"; fail=1; }; }

# Waits until a URL answers (an engine's /health): wait_url URL [TRIES of 0.2 s]
wait_url() {
  for _ in $(seq 1 "${2:-300}"); do curl -sf "$1" >/dev/null && return 0; sleep 0.2; done
  echo "$1 never answered"; return 1
}
# Waits for wsyncd's socket: wait_sock PATH
wait_sock() {
  for _ in $(seq 1 300); do [[ -S $1 ]] && return 0; sleep 0.2; done
  echo "wsyncd never made $1"; return 1
}
# Stops processes started here, by pid: stop_pids PID...
stop_pids() {
  [[ $# -gt 0 ]] || return 0
  kill "$@" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$@" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$@" 2>/dev/null; wait "$@" 2>/dev/null
  return 0
}
stop_started() {
  local alive=()
  for p in "${started_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
  stop_pids "${alive[@]}"
}
# Every wsyncd keeps its default state directory (root's /var/lib/wsync otherwise) in a folder of
# its own: no step restores another's groups, and wsyncds side by side never share its lock.
fresh_state() { XDG_STATE_HOME=$(mktemp -d "$LOGS/state.XXXXXX"); export XDG_STATE_HOME; }
# wsyncd in CUDA mode on GPU 0's slots: start_wsyncd SOCKET LOG [wsyncd options...]; sets
# wsyncd_pid and waits for its socket.
start_wsyncd() {
  local sock=$1 log=$2
  shift 2
  rm -f "$sock"
  fresh_state
  "$WSYNCD" --mode cuda --nccl-lib "$NCCL_LIB" --socket "$sock" --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 "$@" >"$log" 2>&1 &
  wsyncd_pid=$!
  started_pids+=("$wsyncd_pid")
  wait_sock "$sock"
}
# An engine simulator on GPU memory: start_engine KIND PORT GPUS LOG [engine options...], KIND
# one of sglang, lmdeploy, vllm (IPC backend) or vllm_nccl (vLLM 0.30.0's NCCL backend unless
# --version says otherwise); sets engine_pid and waits for its /health. A kind with one
# simulator for both memories (tests/engines/KIND/KIND_engine.py) runs it with --memory cuda.
start_engine() {
  local kind=$1 port=$2 gpus=$3 log=$4
  shift 4
  local engine=(tests/gpu/"${kind}"_torch_engine.py)
  [[ -f tests/engines/$kind/${kind}_engine.py ]] &&
    engine=(tests/engines/"$kind"/"${kind}"_engine.py --memory cuda)
  [[ $kind == vllm_nccl ]] &&
    engine=(tests/engines/vllm/vllm_engine.py --memory cuda --backend nccl --version 0.30.0)
  python3 "${engine[@]}" --port "$port" --gpus "$gpus" "$@" >>"$log" 2>&1 &
  engine_pid=$!
  started_pids+=("$engine_pid")
  wait_url "http://127.0.0.1:$port/health"
}
# The UUID torch prints for GPU N (colocated groups name each engine rank's GPU by it).
gpu_uuid() { python3 -c "import torch; print(torch.cuda.get_device_properties(${1:-0}).uuid)"; }
# The Qwen2 trainer: trainer_push SOCKET LOG TIMEOUT_S trainer_push.py-args...; fails the step
# when the trainer does.
trainer_push() {
  local sock=$1 log=$2 limit=$3
  shift 3
  timeout "$limit" python3 tests/gpu/trainer_push.py --socket "$sock" \
    --python-client client/python "$@" 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "FAILED: trainer_push $*"; fail=1; return 1; }
}
# wsyncctl against a socket, its output kept in a log: ctl SOCKET LOG wsyncctl-args...; fails the
# step when wsyncctl does.
ctl() {
  local sock=$1 log=$2
  shift 2
  "$WSYNCCTL" --socket "$sock" "$@" 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "FAILED: wsyncctl $*"; fail=1; return 1; }
}
# Fails the step when a process it started is gone: alive PID WHAT
alive() { kill -0 "$1" 2>/dev/null || { echo "$2 died"; fail=1; }; }
