#!/usr/bin/env bash
# vLLM over NCCL: wsyncd in CUDA mode on GPU 0 as rank 0, vLLM's simulator with its worker on
# GPU 1 (tests/engines/vllm/vllm_engine.py --backend nccl on GPU memory: ctypes NCCL as vLLM's
# PyNccl, the real TCPStore client, ncclCommInitRank and the one-element all-reduce), fed by the
# Qwen2 trainer. Every payload
# generation the version gates serve, 3 versions each, bit-identical:
#   0.30.0  packed in init_info, weight_version at finish, nccl_unique_id_b64: the store and the
#           unique id, each unpacked and packed
#   0.28.1  packed in init_info, no unique id: the store, unpacked and packed
#   0.16.0  packed in every update_info, no session routes: the store, unpacked and packed
source tests/gpu/lib/common.sh
gpu_step vllm_nccl "vLLM over NCCL: wsyncd (cuda, GPU 0) + vLLM torch engine (GPU 1) + Qwen2 trainer"
need_gpus 2
sock=/tmp/wsync-gpu-vllm-nccl.sock
url=http://127.0.0.1:30092
log=$LOGS/vllm-nccl.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
ran=()
for gen in 0.30.0 0.28.1 0.16.0; do
  start_engine vllm_nccl 30092 1 "$LOGS/engine.log" --version $gen || fail=1
  modes=("store" "store --vllm-packed --vllm-packed-chunk-bytes 67108864")
  [[ $gen == 0.30.0 ]] && modes+=("unique-id" "unique-id --vllm-packed")
  i=0
  for mode in "${modes[@]}"; do
    i=$((i + 1))
    group="vllm-${gen//./}-$i"
    # shellcheck disable=SC2086
    if ctl $sock "$log" create-group "$group" --kind vllm --transport broadcast \
        --vllm-rendezvous $mode --engine "$url"; then
      trainer_push $sock "$log" 150 --group "$group" --engines $url --version-prefix "$group-" \
        --versions 3 && ran+=("$gen $mode")
    fi
    ctl $sock "$log" destroy-group "$group"
  done
  stop_pids $engine_pid
done
alive $d wsyncd
grep -h "RESULT" "$log"
end_step "$(IFS=';'; echo "${ran[*]}") passed"
