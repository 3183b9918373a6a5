#!/usr/bin/env bash
# The node relay on GPUs (tests/bench/relay_bench.py): trainer and upstream wsyncd on GPU 0, a
# downstream wsyncd delivering over CUDA IPC to its engine on GPU 1, NCCL between the daemons;
# against the link's NCCL broadcast ceiling and the direct path (the upstream as rank 0 of an
# engine's own group) in the same run; bit-identical engines; an engine restarted with no trainer
# brought to the downstream's resident version. Over NVLink, then with every process's NCCL
# forced to sockets on loopback (standing for a node boundary; IPC delivery is unchanged).
# WSYNC_RELAY_LINKS picks the links ("nvlink sockets"); WSYNC_RELAY_ARGS adds flags.
# runner: alone (timed: the machine to itself)
source tests/gpu/lib/common.sh
gpu_step relay "node relay: upstream wsyncd (GPU 0) => downstream wsyncd + IPC engine (GPU 1)"
need_gpus 2
lane=${WSYNC_GPU_LANE:-0}
for link in ${WSYNC_RELAY_LINKS:-nvlink sockets}; do
  (
    if [[ $link == sockets ]]; then
      export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
        NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4
    fi
    # shellcheck disable=SC2086
    timeout "${WSYNC_RELAY_TIMEOUT:-270}" python3 tests/bench/relay_bench.py --wsyncd "$WSYNCD" \
      --nccl-lib "$NCCL_LIB" --python-client client/python --out "$LOGS/relay-$link" \
      --link "$link" --relay-port $((30081 + 1000 * lane)) --direct-port $((30082 + 1000 * lane)) \
      ${WSYNC_RELAY_ARGS:-}
  ) 2>&1 | tee -a "$LOGS/relay.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
  [[ -f $LOGS/relay-$link/relay.json ]] && cp "$LOGS/relay-$link/relay.json" "$OUT/relay-$link.json"
done
cp "$LOGS/relay.txt" "$OUT/" 2>/dev/null
end_step
