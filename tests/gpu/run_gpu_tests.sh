#!/usr/bin/env bash
# One device call: GPU unit tests, then wsyncd in CUDA mode as NCCL rank 0 of real torch engine
# ranks (SGLang semantics), fed by a transformers Qwen2 trainer over CUDA IPC. Results under $OUT.
# Run from the repo root on the GPU machine with build/dev-bundle carried:
#   bash tests/gpu/run_gpu_tests.sh
# The bundle (built here, since the GPU machine has no gRPC/abseil):
#   cd build && ../../shared/tools/device-bundle dev-bundle daemon/wsyncd client/wsyncctl \
#     client/libwsync_client.so tests/cuda_resources_test tests/kernel_bench &&
#   strip --strip-unneeded dev-bundle/bin/* dev-bundle/lib/*
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/wsync-gpu-out}
mkdir -p "$OUT"
# Everything printed also lands in $OUT at once, so a run cut off by the device's time limit still
# brings back how far it got.
# A bare `wait` would also wait for this tee and hang: always wait on the pids started here.
exec > >(tee -a "$OUT/run.log") 2>&1
# Logs go to one archive ($OUT/logs.tgz); the summaries that matter are copied beside it.
LOGS=$(mktemp -d /tmp/wsync-gpu-logs.XXXXXX)
collect() {
  tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
  cp "$LOGS/bench.txt" "$LOGS/kernels.txt" "$OUT/" 2>/dev/null
  for d in "$LOGS"/bench-*/; do
    [[ -f $d/bench.json ]] && cp "$d/bench.json" "$OUT/$(basename "$d").json"
  done
}
trap collect EXIT
# STEPS=kernels,ipc,ops,quorum,ipc_tp2,ipc_route,ipc_bench,ipc_lmdeploy,ipc_vllm,ipc_7b,lmdeploy_nccl,vllm_nccl,kill,per_tensor,
# memory,pull,dtensor,mismatch,bench picks
# steps (default: all); the Qwen2 trainer test always runs (on 2+ GPUs). The colocated steps (ipc,
# ipc_lmdeploy, ipc_vllm, ipc_7b) run on GPU 0 alone, on any number of GPUs. With 4+ GPUs a second engine with 2 TP ranks joins the group, and the
# benchmark also runs with 3 receiving ranks. WSYNC_BENCH_ARGS adds benchmark flags (no quoted
# values); WSYNC_BENCH_VARIANTS is its --variants value (default: pull mode with 2 and 4 slots and
# push with 4 slots, the configurations that once stalled, and pull from a flat parameter buffer,
# read in place), e.g.
# 'no-checksum=--checksum none;4-slots=--slots 4'.
want() { [[ ",${STEPS:-all}," == *",all,"* || ",${STEPS:-}," == *",$1,"* ]]; }
# WSYNC_GPU_MPS=1 runs everything under an MPS control daemon started (and stopped) here, with its
# own pipe and log folders: processes sharing a GPU then run kernels side by side instead of taking
# turns by time slice (see docs/PERFORMANCE.md).
if [[ ${WSYNC_GPU_MPS:-0} == 1 ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=$LOGS/mps-pipe CUDA_MPS_LOG_DIRECTORY=$LOGS/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "nvidia-cuda-mps-control failed"; exit 1; }
  stop_mps() { echo quit | nvidia-cuda-mps-control; collect; }
  trap stop_mps EXIT
  echo "MPS control daemon started (pipe $CUDA_MPS_PIPE_DIRECTORY)"
fi
B=build/dev-bundle
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
export WSYNC_CLIENT_LIB=$PWD/$B/bin/libwsync_client.so
NCCL_LIB=$(python3 -c "import glob,os,torch; print(glob.glob(os.path.dirname(torch.__file__)+'/../nvidia/nccl/lib/libnccl.so*')[0])")
fail=0
step() { echo; echo "=== $*"; }
# Per-step verdicts: begin_step NAME ... end_step [SKIP|NOTE text]. Inside, the usual `fail=1`
# marks the step failed; end_step folds it into the run's verdict and records one line, printed
# again above GPU RESULT.
begin_step() { step_name=$1; step_saved_fail=$fail; fail=0; }
end_step() {
  local verdict note=${2:-}
  if [[ ${1:-} == SKIP ]]; then verdict=SKIP; else verdict=$([[ $fail -eq 0 ]] && echo PASS || echo FAIL); fi
  [[ ${1:-} == NOTE || ${1:-} == SKIP ]] || note=${1:-}
  echo "STEP $step_name: $verdict${note:+ ($note)}" | tee -a "$LOGS/steps.txt"
  fail=$(( step_saved_fail | fail ))
}
steps_summary() { [[ -f $LOGS/steps.txt ]] && cat "$LOGS/steps.txt"; }
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
  kill "$@" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$@" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$@" 2>/dev/null; wait "$@" 2>/dev/null
}
# Every wsyncd here (and those the benchmarks start) keeps its default state directory (root's
# /var/lib/wsync otherwise) in a folder of its own: no step restores an earlier step's groups, and
# wsyncds side by side never share a directory's lock. Call before each start: fresh_state
fresh_state() { XDG_STATE_HOME=$(mktemp -d "$LOGS/state.XXXXXX"); export XDG_STATE_HOME; }
# wsyncd in CUDA mode on GPU 0's slots: start_wsyncd SOCKET LOG [wsyncd options...]; sets wsyncd_pid
start_wsyncd() {
  local sock=$1 log=$2
  shift 2
  rm -f "$sock"
  fresh_state
  $B/bin/wsyncd --mode cuda --nccl-lib "$NCCL_LIB" --socket "$sock" --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 "$@" >"$log" 2>&1 &
  wsyncd_pid=$!
}

step "machine"
{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'transformers', transformers.__version__)"
  echo "nccl lib: $NCCL_LIB"
} 2>&1 | tee "$LOGS/machine.txt"
ngpu=$(nvidia-smi -L | wc -l)

step "gpu unit tests"
# The second NCCL of the per-group test: torch's copy beside the loader's libnccl.so.2.
WSYNC_SECOND_NCCL="$NCCL_LIB" $B/bin/cuda_resources_test 2>&1 | tee "$LOGS/cuda_resources_test.log" | tail -8
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1

if want kernels; then
  step "kernel bandwidth: bucket copy and checksums on one GPU"
  $B/bin/kernel_bench --sizes 128,1024,4096 2>&1 | tee "$LOGS/kernels.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
fi

sock=/tmp/wsync-gpu.sock
if want ipc; then
  begin_step ipc
  # Colocated: wsyncd, the trainer and a torch engine rank share GPU 0. The engine loads every
  # bucket from wsyncd's slots through CUDA IPC, as SGLang's update_weights_from_tensor does (exact-
  # name unpickler, the GPU named by UUID); both load formats, then an engine killed mid-update.
  step "colocated (ipc): wsyncd (cuda) + torch engine + Qwen2 trainer on GPU 0"
  fresh_state
  $B/bin/wsyncd --mode cuda --nccl-lib "$NCCL_LIB" --socket $sock --slot-bytes 64MiB \
    --bucket-timeout 60 --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    >"$LOGS/ipc-wsyncd.log" 2>&1 &
  ipc_d=$!
  python3 tests/gpu/sglang_torch_engine.py --port 30011 --gpus 0 >"$LOGS/ipc-engine.log" 2>&1 &
  ipc_e=$!
  for _ in $(seq 1 300); do
    [[ -S $sock ]] && curl -s localhost:30011/health >/dev/null && break
    sleep 0.2
  done
  uuid=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).uuid)")
  echo "GPU 0 UUID $uuid" | tee "$LOGS/ipc.log"
  ipc_push() {
    timeout 150 python3 tests/gpu/trainer_push.py --socket $sock --group "$1" \
      --engines http://127.0.0.1:30011 --python-client client/python --version-prefix "$1-" \
      "${@:2}" 2>&1 | tee -a "$LOGS/ipc.log"
    return "${PIPESTATUS[0]}"
  }
  for format in flattened_bucket per_tensor; do
    $B/bin/wsyncctl --socket $sock create-group "colo-$format" --transport ipc \
      --load-format "$format" --engine "http://127.0.0.1:30011@GPU-$uuid" 2>&1 | tee -a "$LOGS/ipc.log"
    ipc_push "colo-$format" --versions 3 || fail=1
  done
  # Zero copy: parameters in one flat buffer, pulled; every request names that buffer, and the
  # engine reads each bucket there (the trainer checks every bucket was read in place).
  ipc_push colo-flattened_bucket --versions 2 --pull --flat --version-prefix zero-copy- || fail=1
  $B/bin/wsyncctl --socket $sock group colo-flattened_bucket 2>&1 | tee -a "$LOGS/ipc.log"
  # An engine that dies at its 2nd bucket: the update fails naming it, wsyncd stays up, and the
  # next update into a fresh engine on the same port succeeds.
  kill $ipc_e; wait $ipc_e 2>/dev/null
  python3 tests/gpu/sglang_torch_engine.py --port 30011 --gpus 0 --die-at-update 1 \
    >"$LOGS/ipc-engine-dies.log" 2>&1 &
  ipc_e=$!
  for _ in $(seq 1 300); do curl -s localhost:30011/health >/dev/null && break; sleep 0.2; done
  ipc_push colo-flattened_bucket --versions 1 --expect-failure "30011" || fail=1
  kill $ipc_e 2>/dev/null; wait $ipc_e 2>/dev/null
  python3 tests/gpu/sglang_torch_engine.py --port 30011 --gpus 0 >"$LOGS/ipc-engine2.log" 2>&1 &
  ipc_e=$!
  for _ in $(seq 1 300); do curl -s localhost:30011/health >/dev/null && break; sleep 0.2; done
  ipc_push colo-flattened_bucket --versions 2 || fail=1
  kill -0 $ipc_d || { echo "wsyncd died"; fail=1; }
  kill $ipc_e $ipc_d; wait $ipc_e $ipc_d 2>/dev/null
  grep -h "RESULT" "$LOGS/ipc.log"
  end_step
fi

# GPU 0's UUID as torch prints it (the colocated groups name each engine rank's GPU by it), asked
# once.
gpu0_uuid() {
  [[ -n ${gpu0_uuid_cached:-} ]] ||
    gpu0_uuid_cached=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).uuid)")
  echo "$gpu0_uuid_cached"
}

if want ops; then
  # Operations in CUDA mode (issue 14): wsyncd with --metrics-listen and a notify socket of our
  # own standing in for systemd, a colocated group fed two versions by the Qwen2 trainer, then the
  # metrics (the NCCL library loaded, device memory held, updates and bucket phases), wsyncctl
  # health and doctor (the GPU by UUID, NCCL's version), READY and WATCHDOG, and STOPPING at
  # SIGTERM.
  begin_step ops
  step "operations in CUDA mode: metrics, health, doctor, systemd notify"
  osock=/tmp/wsync-gpu-ops.sock
  olog=$LOGS/ops.log
  notify=$LOGS/ops-notify.sock
  python3 -c "
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1])
with open(sys.argv[2], 'a') as f:
    while True:
        f.write(s.recv(4096).decode().replace(chr(10), ' ') + chr(10)); f.flush()
" "$notify" "$LOGS/ops-notify.txt" &
o_n=$!
  sleep 0.5
  NOTIFY_SOCKET=$notify WATCHDOG_USEC=2000000 start_wsyncd $osock "$LOGS/ops-wsyncd.log" \
    --slot-bytes 64MiB --bucket-timeout 60 --metrics-listen 127.0.0.1:19464
  o_d=$wsyncd_pid
  python3 tests/gpu/sglang_torch_engine.py --port 30051 --gpus 0 >"$LOGS/ops-engine.log" 2>&1 &
  o_e=$!
  wait_sock $osock && wait_url http://127.0.0.1:30051/health || fail=1
  $B/bin/wsyncctl --socket $osock create-group ops --transport ipc \
    --engine "http://127.0.0.1:30051@GPU-$(gpu0_uuid)" 2>&1 | tee -a "$olog"
  timeout 150 python3 tests/gpu/trainer_push.py --socket $osock --group ops \
    --engines http://127.0.0.1:30051 --python-client client/python --versions 2 \
    --version-prefix ops- 2>&1 | tee -a "$olog"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  curl -sf http://127.0.0.1:19464/metrics >"$OUT/ops-metrics.txt" || fail=1
  for want_line in 'wsync_up{mode="cuda"} 1' 'wsync_nccl_library_info{' \
      'wsync_updates_total{group="ops",outcome="committed"} 2' \
      'wsync_bucket_phase_seconds_count{group="ops",phase="total"}' \
      'wsync_device_memory_held_bytes{device="0"}' 'wsync_engine_healthy{'; do
    grep -qF "$want_line" "$OUT/ops-metrics.txt" || { echo "metrics lack: $want_line"; fail=1; }
  done
  grep -E '^wsync_(up|nccl_library_info|updates_total|device_memory_held_bytes|engine_healthy)' \
    "$OUT/ops-metrics.txt" | tee -a "$olog"
  $B/bin/wsyncctl --socket $osock health 2>&1 | tee -a "$olog"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "health is not SERVING"; fail=1; }
  $B/bin/wsyncctl --socket $osock doctor 2>&1 | tee "$OUT/ops-doctor.txt" | tee -a "$olog"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "doctor failed a check"; fail=1; }
  grep -qE "^GPUs +OK +[0-9]+ visible: " "$OUT/ops-doctor.txt" || fail=1
  grep -qE "^NCCL +OK +.*2\.[0-9]+\.[0-9]+" "$OUT/ops-doctor.txt" || fail=1
  stop_pids $o_d
  sleep 0.5
  cp "$LOGS/ops-notify.txt" "$OUT/ops-notify.txt"
  for msg in "READY=1" "WATCHDOG=1" "STOPPING=1"; do
    grep -q "^$msg" "$OUT/ops-notify.txt" || { echo "systemd never heard $msg"; fail=1; }
  done
  stop_pids $o_e $o_n
  end_step
fi

if want quorum; then
  # A colocated group's quorum over real CUDA IPC (issue 13): three torch engine ranks on GPU 0,
  # quorum 2; the middle engine dies at its 2nd bucket. The update goes on without it and commits
  # on the other two, bit-identical; wsyncctl names the dead one as needing a full version.
  begin_step quorum
  step "colocated quorum: 3 torch engines on GPU 0, one dies mid-update"
  qsock=/tmp/wsync-gpu-quorum.sock
  qlog=$LOGS/quorum.log
  start_wsyncd $qsock "$LOGS/quorum-wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60
  q_d=$wsyncd_pid
  q_e=()
  for port in 30061 30062 30063; do
    extra=()
    [[ $port == 30062 ]] && extra=(--die-at-update 1)
    python3 tests/gpu/sglang_torch_engine.py --port $port --gpus 0 "${extra[@]}" \
      >"$LOGS/quorum-engine-$port.log" 2>&1 &
    q_e+=($!)
  done
  wait_sock $qsock || fail=1
  for port in 30061 30062 30063; do wait_url http://127.0.0.1:$port/health || fail=1; done
  engines=()
  for port in 30061 30062 30063; do engines+=(--engine "http://127.0.0.1:$port@GPU-$(gpu0_uuid)"); done
  $B/bin/wsyncctl --socket $qsock create-group q --transport ipc --quorum 2 "${engines[@]}" \
    2>&1 | tee -a "$qlog"
  timeout 150 python3 tests/gpu/trainer_push.py --socket $qsock --group q \
    --engines http://127.0.0.1:30061,http://127.0.0.1:30063 --python-client client/python \
    --versions 1 --version-prefix quorum- 2>&1 | tee -a "$qlog"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  grep -qF "('http://127.0.0.1:30062', False)" "$qlog" || { echo "the dead engine is not named"; fail=1; }
  $B/bin/wsyncctl --socket $qsock --json engines >"$LOGS/quorum-engines.json"
  python3 -c "
import json, sys
rows = {e['url']: e['needs_full_version'] for e in json.load(open(sys.argv[1]))['engines']}
print(rows)
sys.exit(0 if rows == {'http://127.0.0.1:30061': False, 'http://127.0.0.1:30062': True,
                       'http://127.0.0.1:30063': False} else 1)" "$LOGS/quorum-engines.json" \
    2>&1 | tee -a "$qlog"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  kill -0 $q_d || { echo "wsyncd died"; fail=1; }
  stop_pids $q_d "${q_e[@]}"
  end_step
fi

if want ipc_tp2; then
  # Colocated with TP=2 (issue 15, item 4): one engine whose two TP ranks are on GPUs 0 and 1, fed
  # by two trainer ranks, one per GPU, each filling wsyncd's slots on its own GPU; wsyncd joins
  # their sessions into one update and each engine rank loads from the slots of its GPU. Every
  # rank must hold every tensor bit-identical, for 2 versions.
  begin_step ipc_tp2
  if [[ $ngpu -lt 2 ]]; then
    end_step SKIP "needs 2 GPUs, this machine has $ngpu"
  else
    step "colocated TP=2: two trainer ranks on GPUs 0 and 1, one engine with a rank on each"
    tsock=/tmp/wsync-gpu-tp2.sock
    tlog=$LOGS/ipc-tp2.log
    start_wsyncd $tsock "$LOGS/tp2-wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60
    t_d=$wsyncd_pid
    python3 tests/gpu/sglang_torch_engine.py --port 30071 --gpus 0,1 >"$LOGS/tp2-engine.log" 2>&1 &
    t_e=$!
    wait_sock $tsock && wait_url http://127.0.0.1:30071/health || fail=1
    uuid1=$(python3 -c "import torch; print(torch.cuda.get_device_properties(1).uuid)")
    $B/bin/wsyncctl --socket $tsock create-group tp2 --transport ipc \
      --engine "http://127.0.0.1:30071@GPU-$(gpu0_uuid),GPU-$uuid1" 2>&1 | tee -a "$tlog"
    t_p=()
    for rank in 0 1; do
      timeout 200 python3 tests/gpu/trainer_push.py --socket $tsock --group tp2 \
        --engines http://127.0.0.1:30071 --python-client client/python --versions 2 \
        --version-prefix tp2- --device $rank --tp-rank $rank >"$LOGS/tp2-trainer$rank.log" 2>&1 &
      t_p+=($!)
    done
    for rank in 0 1; do
      wait "${t_p[$rank]}" || { echo "trainer rank $rank failed"; fail=1; }
      cat "$LOGS/tp2-trainer$rank.log" | tee -a "$tlog"
    done
    kill -0 $t_d || { echo "wsyncd died"; fail=1; }
    stop_pids $t_d $t_e
    end_step
  fi
fi

if want ipc_route; then
  # Colocated over SGLang's map-once route (--sglang-ipc-route ipc): one POST
  # /update_weights_from_ipc per update, during which the engine rank runs checkpoint-engine's
  # worker over ZMQ (tests/sim/checkpoint_engine_worker.py with real torch, libzmq through ctypes
  # from wsyncd's bundle): it maps wsyncd's slot allocation once per update and loads each bucket
  # from its byte offsets. 3 versions from the slots and 2 zero-copy from the trainer's flat
  # buffer, bit-identical; the older worker generation (post-processing at the first None); an
  # engine killed at its 2nd bucket fails the update naming it, and a fresh one takes the next.
  begin_step ipc_route
  step "colocated, SGLang map-once route: wsyncd (cuda) + torch engine + Qwen2 trainer on GPU 0"
  rsock=/tmp/wsync-gpu-route.sock
  rurl=http://127.0.0.1:30031
  rlog=$LOGS/ipc-route.log
  # Slots above the largest tensor (the route maps one allocation per update), below the model
  # (0.21 GiB), so that an update has several buckets.
  start_wsyncd $rsock "$LOGS/route-wsyncd.log" --slot-bytes 128MiB --bucket-timeout 60
  r_d=$wsyncd_pid
  route_engine() {
    python3 tests/gpu/sglang_torch_engine.py --port 30031 --gpus 0 "$@" \
      >>"$LOGS/route-engine.log" 2>&1 &
    r_e=$!
    wait_url $rurl/health
  }
  route_push() {
    timeout 150 python3 tests/gpu/trainer_push.py --socket $rsock --group route --engines $rurl \
      --python-client client/python "$@" 2>&1 | tee -a "$rlog"
    return "${PIPESTATUS[0]}"
  }
  route_engine || fail=1
  wait_sock $rsock || fail=1
  uuid=$(gpu0_uuid)
  $B/bin/wsyncctl --socket $rsock create-group route --transport ipc --sglang-ipc-route ipc \
    --engine "$rurl@GPU-$uuid" 2>&1 | tee "$rlog"
  route_push --versions 3 --version-prefix route- || fail=1
  route_push --versions 2 --pull --flat --version-prefix route-zero-copy- || fail=1
  $B/bin/wsyncctl --socket $rsock engines 2>&1 | tee -a "$rlog"
  stop_pids $r_e
  route_engine --ce-worker g1 || fail=1
  route_push --versions 2 --version-prefix route-g1- || fail=1
  stop_pids $r_e
  route_engine --die-at-update 1 || fail=1
  route_push --versions 1 --version-prefix route-killed- --expect-failure 30031 || fail=1
  stop_pids $r_e
  route_engine || fail=1
  route_push --versions 2 --version-prefix route-after- || fail=1
  kill -0 $r_d || { echo "wsyncd died"; fail=1; }
  stop_pids $r_e $r_d
  grep -h "RESULT" "$rlog"
  end_step
fi

if want ipc_bench; then
  # The colocated benchmark (tests/bench/ipc_bench.py): Qwen2.5-7B shapes on GPU 0 against the
  # one-copy ceiling and the peers' design, both SGLang routes; WSYNC_IPC_BENCH_ARGS adds flags.
  begin_step ipc_bench
  step "colocated benchmark: Qwen2.5-7B shapes, both SGLang routes, against the one-copy ceiling"
  timeout ${WSYNC_BENCH_TIMEOUT:-540} python3 tests/bench/ipc_bench.py --wsyncd $B/bin/wsyncd \
    --nccl-lib "$NCCL_LIB" --python-client client/python --out "$LOGS/bench-ipc" \
    ${WSYNC_IPC_BENCH_ARGS:-} 2>&1 | tee "$LOGS/ipc-bench.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  cp "$LOGS/ipc-bench.txt" "$OUT/" 2>/dev/null
  end_step
fi

if want ipc_lmdeploy; then
  # Colocated, LMDeploy semantics: a real-torch LMDeploy receive side (tests/gpu/
  # lmdeploy_torch_engine.py: update_params after PR #4397, the flattened_tensor cached until
  # finished, require_clone false, the event waited on and recorded) beside wsyncd and the
  # trainer on GPU 0. Both load formats, 3 versions bit-identical; flattened_tensor must come once
  # per version, GPU and dtype (the slots are regions of one allocation per GPU; counted by the
  # engine, recorded in $OUT/lmdeploy_flattened.jsonl); an engine killed mid-update fails the
  # update, a fresh one then takes the next; a server refusing pickles (PR #4964) is a
  # configuration error.
  begin_step ipc_lmdeploy
  step "colocated LMDeploy (ipc): wsyncd (cuda) + LMDeploy torch engine + Qwen2 trainer on GPU 0"
  lsock=/tmp/wsync-gpu-lmdeploy.sock
  lurl=http://127.0.0.1:30021
  llog=$LOGS/lmdeploy.log
  start_wsyncd $lsock "$LOGS/lmdeploy-wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60
  l_d=$wsyncd_pid
  python3 tests/gpu/lmdeploy_torch_engine.py --port 30021 --gpus 0 \
    >"$LOGS/lmdeploy-engine.log" 2>&1 &
  l_e=$!
  gpu0_uuid >/dev/null
  wait_sock $lsock && wait_url $lurl/health || fail=1
  uuid=$(gpu0_uuid)
  echo "GPU 0 UUID $uuid" | tee "$llog"
  rm -f "$OUT/lmdeploy_flattened.jsonl"
  lmd_push() {
    timeout 150 python3 tests/gpu/trainer_push.py --socket $lsock --group "$1" \
      --engines "${lmd_url:-$lurl}" --python-client client/python --version-prefix "$1-" \
      "${@:2}" 2>&1 | tee -a "$llog"
    return "${PIPESTATUS[0]}"
  }
  for format in flattened_bucket per_tensor; do
    $B/bin/wsyncctl --socket $lsock create-group "lmd-$format" --kind lmdeploy --transport ipc \
      --load-format "$format" --engine "$lurl@GPU-$uuid" 2>&1 | tee -a "$llog"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  done
  lmd_push lmd-flattened_bucket --versions 3 --flattened-record "$OUT/lmdeploy_flattened.jsonl" \
    || fail=1
  lmd_push lmd-per_tensor --versions 2 || fail=1
  curl -s $lurl/sim/checksums | python3 -c "import json,sys; d=json.load(sys.stdin); \
print('engine:', {k: d[k] for k in ('updates_received', 'flattened_tensor_sent', 'finished_calls', \
'casts', 'loads_while_asleep', 'is_sleeping', 'last_error')}); print('events:', d['events'][-12:])" \
    2>&1 | tee -a "$llog"
  # Killed mid-update: its ranks exit at the 2nd /update_weights. The update fails naming the
  # engine, wsyncd stays up, and a fresh engine on the same port takes the next two versions.
  stop_pids $l_e
  python3 tests/gpu/lmdeploy_torch_engine.py --port 30021 --gpus 0 --die-at-update 1 \
    >"$LOGS/lmdeploy-engine-dies.log" 2>&1 &
  l_e=$!
  wait_url $lurl/health || fail=1
  lmd_push lmd-flattened_bucket --versions 1 --version-prefix killed- --expect-failure 30021 \
    || fail=1
  timeout 30 tail --pid=$l_e -f /dev/null
  stop_pids $l_e
  python3 tests/gpu/lmdeploy_torch_engine.py --port 30021 --gpus 0 \
    >"$LOGS/lmdeploy-engine2.log" 2>&1 &
  l_e=$!
  wait_url $lurl/health || fail=1
  lmd_push lmd-flattened_bucket --versions 2 --version-prefix after-kill- \
    --flattened-record "$OUT/lmdeploy_flattened.jsonl" || fail=1
  # PR #4964 without LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1: refused, named, not retried.
  python3 tests/gpu/lmdeploy_torch_engine.py --port 30022 --gpus 0 --refuse-pickle \
    >"$LOGS/lmdeploy-engine-refuses.log" 2>&1 &
  l_r=$!
  wait_url http://127.0.0.1:30022/health || fail=1
  $B/bin/wsyncctl --socket $lsock create-group lmd-refuse --kind lmdeploy --transport ipc \
    --engine "http://127.0.0.1:30022@GPU-$uuid" 2>&1 | tee -a "$llog"
  lmd_url=http://127.0.0.1:30022 lmd_push lmd-refuse --versions 1 \
    --expect-failure LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS || fail=1
  kill -0 $l_d || { echo "wsyncd died"; fail=1; }
  stop_pids $l_e $l_r $l_d
  note=""
  if [[ -f $OUT/lmdeploy_flattened.jsonl ]]; then
    note=$(python3 -c "import json; rows = [json.loads(l) for l in open('$OUT/lmdeploy_flattened.jsonl')]; \
print('flattened_tensor per version/GPU/dtype: ' + ', '.join(f\"{r['arrivals']}/{r['floor']}\" \
for r in rows) + ' (arrivals/layout floor)')")
  fi
  grep -h "RESULT" "$llog"
  end_step NOTE "$note"
fi

if want ipc_vllm; then
  # Colocated, vLLM semantics: a real-torch vLLM IPC receive side (tests/gpu/vllm_torch_engine.py:
  # ipc_handles_pickled, args[6] replaced, packed chunks cut by tensor_sizes and cloned, start/
  # finish sessions with 409 out of order) beside wsyncd and the trainer on GPU 0; 3 versions
  # bit-identical in each request form wsyncctl can choose (packed, unpacked).
  begin_step ipc_vllm
  step "colocated vLLM (ipc): wsyncd (cuda) + vLLM torch engine + Qwen2 trainer on GPU 0"
  help=$($B/bin/wsyncctl create-group --help 2>&1)
  if ! grep -qi vllm <<<"$help"; then
    end_step SKIP "wsyncctl create-group --help has no vllm kind yet"
  else
    vsock=/tmp/wsync-gpu-vllm.sock
    vurl=http://127.0.0.1:30031
    vlog=$LOGS/vllm.log
    start_wsyncd $vsock "$LOGS/vllm-wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60
    v_d=$wsyncd_pid
    uuid=$(gpu0_uuid)
    echo "GPU 0 UUID $uuid" | tee "$vlog"
    wait_sock $vsock || fail=1
    # Whether wsyncd has a vLLM adapter at all, asked before any engine is up: a kind it cannot
    # serve is refused before the engine is probed.
    out=$($B/bin/wsyncctl --socket $vsock create-group vllm-probe --kind vllm --transport ipc \
      --engine "$vurl@GPU-$uuid" 2>&1)
    echo "$out" | tee -a "$vlog"
    skipped=""
    if grep -qiE "not supported|unimplemented" <<<"$out"; then
      skipped="wsyncd has no vLLM adapter yet: $(head -1 <<<"$out")"
    fi
    $B/bin/wsyncctl --socket $vsock destroy-group vllm-probe >/dev/null 2>&1
    if [[ -z $skipped ]]; then
      python3 tests/gpu/vllm_torch_engine.py --port 30031 --gpus 0 >"$LOGS/vllm-engine.log" 2>&1 &
      v_e=$!
      wait_url $vurl/health || fail=1
    fi
    # The request form per group: `wsyncctl create-group --vllm-packed` (one dict per chunk plus
    # tensor_sizes) or the default, unpacked (one dict per tensor). WSYNC_VLLM_PACKED_ARGS /
    # WSYNC_VLLM_UNPACKED_ARGS override the create-group options.
    packed_args=${WSYNC_VLLM_PACKED_ARGS-}
    unpacked_args=${WSYNC_VLLM_UNPACKED_ARGS-}
    if [[ -z $packed_args$unpacked_args ]] && grep -q -- '--vllm-packed' <<<"$help"; then
      packed_args="--vllm-packed"
    fi
    forms=()
    [[ -n $packed_args || -n $unpacked_args ]] && forms=(packed unpacked) || forms=(default)
    [[ -n $skipped ]] && forms=()
    for form in "${forms[@]}"; do
      case $form in
        packed) extra=$packed_args ;;
        unpacked) extra=$unpacked_args ;;
        *) extra="" ;;
      esac
      # shellcheck disable=SC2086
      out=$($B/bin/wsyncctl --socket $vsock create-group "vllm-$form" --kind vllm --transport ipc \
        $extra --engine "$vurl@GPU-$uuid" 2>&1)
      rc=$?
      echo "$out" | tee -a "$vlog"
      [[ $rc -eq 0 ]] || { fail=1; continue; }
      expect=()
      [[ $form != default ]] && expect=(--expect-form "$form")
      timeout 150 python3 tests/gpu/trainer_push.py --socket $vsock --group "vllm-$form" \
        --engines $vurl --python-client client/python --version-prefix "vllm-$form-" \
        --versions 3 "${expect[@]}" 2>&1 | tee -a "$vlog"
      [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
    done
    [[ -n $skipped ]] || { curl -s $vurl/sim/stats 2>&1 | tee -a "$vlog"; echo; }
    kill -0 $v_d || { echo "wsyncd died"; fail=1; }
    stop_pids ${v_e:-} $v_d
    grep -h "RESULT" "$vlog"
    if [[ -n $skipped ]]; then
      end_step SKIP "$skipped"
    elif [[ ${forms[0]} == default ]]; then
      end_step NOTE "wsyncctl has no packed/unpacked choice yet: only the adapter's default form ran"
    else
      end_step
    fi
  fi
fi

if want ipc_7b; then
  # The SGLang colocated path at 7B size: Qwen2.5-7B's 339 bf16 tensors (14.19 GiB, random) pushed
  # 3 times through wsyncd into tests/gpu/sglang_torch_engine.py on GPU 0, bit-identical each time.
  # The trainer, the engine's copy and wsyncd's slots need about 40 GiB of GPU 0.
  begin_step ipc_7b
  step "colocated (ipc) at 7B size: Qwen2.5-7B shapes through wsyncd into the SGLang torch engine"
  free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | head -1)
  if [[ -z $free_mib || $free_mib -lt 40960 ]]; then
    end_step SKIP "GPU 0 has ${free_mib:-?} MiB free; the 7B shapes need about 40 GiB"
  else
    ssock=/tmp/wsync-gpu-7b.sock
    surl=http://127.0.0.1:30041
    slog=$LOGS/ipc-7b.log
    start_wsyncd $ssock "$LOGS/ipc-7b-wsyncd.log" --slot-bytes 512MiB --bucket-timeout 120
    s_d=$wsyncd_pid
    python3 tests/gpu/sglang_torch_engine.py --port 30041 --gpus 0 >"$LOGS/ipc-7b-engine.log" 2>&1 &
    s_e=$!
    uuid=$(gpu0_uuid)
    wait_sock $ssock && wait_url $surl/health || fail=1
    $B/bin/wsyncctl --socket $ssock create-group colo-7b --transport ipc \
      --engine "$surl@GPU-$uuid" 2>&1 | tee "$slog"
    timeout 420 python3 tests/gpu/trainer_push.py --socket $ssock --group colo-7b --engines $surl \
      --python-client client/python --version-prefix 7b- --versions 3 \
      --model qwen2.5-7b-shapes 2>&1 | tee -a "$slog"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1 | tee -a "$slog"
    kill -0 $s_d || { echo "wsyncd died"; fail=1; }
    stop_pids $s_e $s_d
    note=$(grep -h "^version 7b-" "$slog" | sed -E 's/.*: ([0-9]+) buckets.* in ([0-9.]+) s.*/\1 buckets \2 s/' | paste -sd';' -)
    end_step NOTE "$note"
  fi
fi

if [[ $ngpu -lt 2 ]]; then
  # NCCL refuses two ranks of one communicator on one GPU, so every step with an engine needs a
  # second GPU. What one GPU can show: wsyncd in CUDA mode serving a trainer's session, with its
  # slots mapped into the trainer process through CUDA IPC.
  step "one GPU: wsyncd (cuda) serves a Python trainer session over CUDA IPC"
  fresh_state
  $B/bin/wsyncd --mode cuda --nccl-lib "$NCCL_LIB" --socket $sock --slot-bytes 64MiB \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 >"$LOGS/wsyncd.log" 2>&1 &
  d1=$!
  for _ in $(seq 1 100); do [[ -S $sock ]] && break; sleep 0.1; done
  $B/bin/wsyncctl --socket $sock status 2>&1 | tee "$LOGS/one-gpu.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  timeout 60 python3 - "$sock" <<'PY' 2>&1 | tee -a "$LOGS/one-gpu.log"
import sys
sys.path.insert(0, "client/python")
import wsync
c = wsync.Client("unix:" + sys.argv[1], device=0, name="one-gpu smoke")
print("session open, slot bytes", c.slot_bytes)
assert c.slot_bytes == 64 << 20
c.close()
print("ONE-GPU SESSION OK")
PY
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  $B/bin/wsyncctl --socket $sock buffers 2>&1 | tee -a "$LOGS/one-gpu.log"
  kill $d1; wait $d1 2>/dev/null
  echo "steps with an engine (trainer, kill, per_tensor, memory, pull, dtensor, mismatch, bench):"
  echo "skipped, they need 2 GPUs and this machine has $ngpu"
  echo; steps_summary
  echo "GPU RESULT: $([[ $fail -eq 0 ]] && echo PASS || echo FAIL) (one GPU: unit tests, kernels, colocated steps, session)"
  exit $fail
fi

if want lmdeploy_nccl; then
  # LMDeploy over NCCL (PR #4638), 2+ GPUs: wsyncd in CUDA mode on GPU 0 as rank 0, the LMDeploy
  # torch engine's rank on GPU 1 joining through wsyncd's TCPStore (tests/gpu/
  # lmdeploy_torch_engine.py: SGLang's helper, ProcessGroupNCCL without device_id), fed by the
  # Qwen2 trainer. Flattened buckets (one dtype each, one element-typed broadcast) and per tensor,
  # bit-identical; an engine killed at its 2nd bucket fails the update naming it, and a fresh one
  # joins the re-formed group for the next.
  begin_step lmdeploy_nccl
  step "LMDeploy over NCCL: wsyncd (cuda, GPU 0) + LMDeploy torch engine (GPU 1) + Qwen2 trainer"
  nsock=/tmp/wsync-gpu-lmdeploy-nccl.sock
  nurl=http://127.0.0.1:30051
  nlog=$LOGS/lmdeploy-nccl.log
  start_wsyncd $nsock "$LOGS/lmdeploy-nccl-wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60
  n_d=$wsyncd_pid
  n_engine() {
    python3 tests/gpu/lmdeploy_torch_engine.py --port 30051 --gpus 1 --no-digest-log "$@" \
      >>"$LOGS/lmdeploy-nccl-engine.log" 2>&1 &
    n_e=$!
    wait_url $nurl/health
  }
  n_push() {
    timeout 150 python3 tests/gpu/trainer_push.py --socket $nsock --group "$1" --engines $nurl \
      --python-client client/python --version-prefix "$1-" "${@:2}" 2>&1 | tee -a "$nlog"
    return "${PIPESTATUS[0]}"
  }
  n_engine || fail=1
  wait_sock $nsock || fail=1
  for format in flattened_bucket per_tensor; do
    $B/bin/wsyncctl --socket $nsock create-group "lmd-$format" --kind lmdeploy \
      --load-format "$format" --engine "$nurl" 2>&1 | tee -a "$nlog"
    n_push "lmd-$format" --versions 3 || fail=1
    $B/bin/wsyncctl --socket $nsock destroy-group "lmd-$format" 2>&1 | tee -a "$nlog"
  done
  $B/bin/wsyncctl --socket $nsock create-group lmd --kind lmdeploy --engine "$nurl" 2>&1 |
    tee -a "$nlog"
  stop_pids $n_e
  n_engine --die-at-update 1 || fail=1
  n_push lmd --versions 1 --version-prefix lmd-killed- --expect-failure 30051 || fail=1
  stop_pids $n_e
  n_engine || fail=1
  n_push lmd --versions 2 --version-prefix lmd-after- || fail=1
  kill -0 $n_d || { echo "wsyncd died"; fail=1; }
  stop_pids $n_e $n_d
  grep -h "RESULT" "$nlog"
  end_step
fi

if want vllm_nccl; then
  # vLLM over NCCL, 2+ GPUs: wsyncd in CUDA mode on GPU 0 as rank 0, the vLLM torch engine's worker
  # on GPU 1 (tests/gpu/vllm_nccl_torch_engine.py: ctypes NCCL as vLLM's PyNccl, the real
  # TCPStore client, ncclCommInitRank and the one-element all-reduce), fed by the Qwen2 trainer.
  # Both rendezvous modes, unpacked and packed (64 MiB chunks), on the newest generation (packed
  # in init_info) and on 0.27 (packed in every update_info), bit-identical on every version.
  begin_step vllm_nccl
  step "vLLM over NCCL: wsyncd (cuda, GPU 0) + vLLM torch engine (GPU 1) + Qwen2 trainer"
  vsock=/tmp/wsync-gpu-vllm-nccl.sock
  vurl=http://127.0.0.1:30061
  vlog=$LOGS/vllm-nccl.log
  start_wsyncd $vsock "$LOGS/vllm-nccl-wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60
  v_d=$wsyncd_pid
  wait_sock $vsock || fail=1
  for gen in 0.30.0 0.27.0; do
    python3 tests/gpu/vllm_nccl_torch_engine.py --port 30061 --gpus 1 --version $gen \
      >>"$LOGS/vllm-nccl-engine.log" 2>&1 &
    v_e=$!
    wait_url $vurl/health || fail=1
    modes=("store" "store --vllm-packed --vllm-packed-chunk-bytes 67108864")
    [[ $gen == 0.30.0 ]] && modes+=("unique-id" "unique-id --vllm-packed")
    i=0
    for mode in "${modes[@]}"; do
      i=$((i + 1))
      group="vllm-${gen//./}-$i"
      # shellcheck disable=SC2086
      $B/bin/wsyncctl --socket $vsock create-group "$group" --kind vllm --transport broadcast \
        --vllm-rendezvous $mode --engine "$vurl" 2>&1 | tee -a "$vlog"
      timeout 150 python3 tests/gpu/trainer_push.py --socket $vsock --group "$group" \
        --engines $vurl --python-client client/python --version-prefix "$group-" --versions 2 \
        2>&1 | tee -a "$vlog"
      [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "vLLM NCCL $gen $mode: FAILED"; fail=1; }
      $B/bin/wsyncctl --socket $vsock destroy-group "$group" 2>&1 | tee -a "$vlog"
    done
    stop_pids $v_e
  done
  kill -0 $v_d || { echo "wsyncd died"; fail=1; }
  stop_pids $v_d
  grep -h "RESULT" "$vlog"
  end_step
fi

step "wsyncd (cuda) + torch engine(s) + Qwen2 trainer"
pids=()
fresh_state
$B/bin/wsyncd --mode cuda --nccl-lib "$NCCL_LIB" --socket $sock --slot-bytes 64MiB \
  --bucket-timeout 60 --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
  >"$LOGS/wsyncd.log" 2>&1 & pids+=($!)
python3 tests/gpu/sglang_torch_engine.py --port 30001 --gpus 1 >"$LOGS/engine1.log" 2>&1 & pids+=($!)
engines="http://127.0.0.1:30001"
spec=(--engine "http://127.0.0.1:30001#1")
if [[ $ngpu -ge 4 ]]; then
  python3 tests/gpu/sglang_torch_engine.py --port 30002 --gpus 2,3 >"$LOGS/engine2.log" 2>&1 & pids+=($!)
  engines="$engines,http://127.0.0.1:30002"
  spec+=(--engine "http://127.0.0.1:30002#2")
fi
for _ in $(seq 1 300); do
  [[ -S $sock ]] && curl -s localhost:30001/health >/dev/null && \
    { [[ $ngpu -lt 4 ]] || curl -s localhost:30002/health >/dev/null; } && break
  sleep 0.2
done
# Runs the Qwen2 trainer against group "policy": push LOG TIMEOUT_S trainer_push.py-args...
push() {
  local log=$1 limit=$2
  shift 2
  timeout "$limit" python3 tests/gpu/trainer_push.py --socket $sock --engines "$engines" \
    --python-client client/python "$@" 2>&1 | tee -a "$LOGS/$log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
}
# Drops group "policy" and makes it again: regroup LOG [create-group options...]
regroup() {
  local log=$1
  shift
  $B/bin/wsyncctl --socket $sock destroy-group policy 2>&1 | tee -a "$LOGS/$log"
  $B/bin/wsyncctl --socket $sock create-group policy "$@" "${spec[@]}" 2>&1 | tee -a "$LOGS/$log"
}
$B/bin/wsyncctl --socket $sock create-group policy "${spec[@]}" 2>&1 | tee "$LOGS/create-group.log"
push trainer.log 150 --versions 3

if want kill; then
step "engine killed mid-update: the update fails within the deadline; a replacement recovers"
kill "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
python3 tests/gpu/sglang_torch_engine.py --port 30001 --gpus 1 --die-at-update 1 \
  >"$LOGS/engine1-dies.log" 2>&1 & dying=$!
for _ in $(seq 1 300); do curl -s localhost:30001/health >/dev/null && break; sleep 0.2; done
# A restarted engine lost its group: re-create the group so the kill happens mid-update.
regroup kill.log
push kill.log 120 --versions 1 --version-prefix killed- --expect-failure "http://127.0.0.1:30001"
timeout 30 tail --pid=$dying -f /dev/null; kill -9 $dying 2>/dev/null
wait $dying; echo "dying engine exit code: $? (17 = died as asked)" | tee -a "$LOGS/kill.log"
python3 tests/gpu/sglang_torch_engine.py --port 30001 --gpus 1 >"$LOGS/engine1-new.log" 2>&1 & pids+=($!)
for _ in $(seq 1 300); do curl -s localhost:30001/health >/dev/null && break; sleep 0.2; done
push kill.log 120 --versions 1 --version-prefix after-kill-
fi
if want per_tensor; then
step "per-tensor format (load_format null): one typed broadcast per tensor"
regroup per-tensor.log --load-format per_tensor
push per-tensor.log 120 --versions 2 --version-prefix per-tensor-
fi
if want memory; then
step "20 consecutive updates: wsyncd's GPU memory stays flat"
regroup memory.log
push memory.log 180 --versions 20 --version-prefix flat- --watch-pid "${pids[0]}" --verify-every 5
fi
if want pull; then
step "pull mode: wsyncd copies the trainer's tensors itself (CUDA IPC of torch's allocations)"
regroup pull.log
push pull.log 120 --versions 3 --version-prefix pull- --pull
# Released after each version and mapped again by the next (cudaIpcCloseMemHandle, then re-open).
push pull.log 120 --versions 2 --version-prefix pull-release- --pull --release-sources
# Parameters in one flat buffer: every bucket is broadcast straight from it, with no copy.
push pull.log 120 --versions 2 --version-prefix pull-flat- --pull --flat
# Gathered DTensors are temporaries: the client copies them, wsyncd maps nothing that is freed.
push pull.log 120 --versions 1 --version-prefix pull-dtensor- --pull --dtensor
fi
if want dtensor; then
step "DTensors: the Python client gathers each with full_tensor()"
regroup dtensor.log
push dtensor.log 120 --versions 1 --version-prefix dtensor- --dtensor
fi
$B/bin/wsyncctl --socket $sock updates 2>&1 | tee "$LOGS/updates.txt"
$B/bin/wsyncctl --socket $sock engines 2>&1 | tee -a "$LOGS/updates.txt"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
sleep 2; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
wait "${pids[@]}" 2>/dev/null

if want mismatch; then
step "NCCL version mismatch: wsyncd on the system NCCL, engine on torch's"
sys_nccl=$(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2* 2>/dev/null | head -1)
if [[ -n $sys_nccl ]]; then
  sock2=/tmp/wsync-gpu-mismatch.sock
  fresh_state
  $B/bin/wsyncd --mode cuda --nccl-lib "$sys_nccl" --socket $sock2 --slot-bytes 64MiB \
    --bucket-timeout 60 --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    >"$LOGS/wsyncd-mismatch.log" 2>&1 & d2=$!
  python3 tests/gpu/sglang_torch_engine.py --port 30003 --gpus 1 >"$LOGS/engine3.log" 2>&1 & e3=$!
  for _ in $(seq 1 300); do [[ -S $sock2 ]] && curl -s localhost:30003/health >/dev/null && break; sleep 0.2; done
  $B/bin/wsyncctl --socket $sock2 create-group policy --engine "http://127.0.0.1:30003#1" 2>&1 | tee "$LOGS/mismatch.log"
  timeout 120 python3 tests/gpu/trainer_push.py --socket $sock2 --engines http://127.0.0.1:30003 \
    --versions 1 --expect-failure "NCCL" --python-client client/python 2>&1 | tee -a "$LOGS/mismatch.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  kill $d2 $e3 2>/dev/null; sleep 2; kill -9 $d2 $e3 2>/dev/null; wait $d2 $e3 2>/dev/null
else
  echo "no system libnccl found; mismatch case not run" | tee "$LOGS/mismatch.log"
fi
fi
if want bench; then
  step "benchmark: Qwen2.5-7B shapes, wsync vs torch-direct vs the NCCL ceiling"
  bench_engines=()
  bench_pids=()
  receivers=1
  [[ $ngpu -ge 4 ]] && receivers="1 3"
  for g in $(seq 1 $(( ngpu >= 4 ? 3 : 1 ))); do
    python3 tests/gpu/sglang_torch_engine.py --port $((30004 + g)) --gpus $g \
      >"$LOGS/bench-engine$g.log" 2>&1 & bench_pids+=($!)
    bench_engines+=("http://127.0.0.1:$((30004 + g))")
  done
  for url in "${bench_engines[@]}"; do
    for _ in $(seq 1 300); do curl -s "$url/health" >/dev/null && break; sleep 0.2; done
  done
  for n in $receivers; do
    urls=$(IFS=,; echo "${bench_engines[*]:0:$n}")
    timeout ${WSYNC_BENCH_TIMEOUT:-420} python3 tests/bench/bench_update.py --wsyncd $B/bin/wsyncd \
      --nccl-lib "$NCCL_LIB" --engines "$urls" --python-client client/python \
      --out "$LOGS/bench-$n" --variants "${WSYNC_BENCH_VARIANTS-pull=client:pull;pull-4-slots=client:pull --slots 4;4-slots=--slots 4;pull-flat=client:pull client:flat}" ${WSYNC_BENCH_ARGS:-} 2>&1 | tee -a "$LOGS/bench.txt"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  done
  for p in "${bench_pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 2; for p in "${bench_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait "${bench_pids[@]}" 2>/dev/null
fi
echo; steps_summary
echo "GPU RESULT: $([[ $fail -eq 0 ]] && echo PASS || echo FAIL)"
exit $fail
