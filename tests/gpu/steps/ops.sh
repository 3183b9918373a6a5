#!/usr/bin/env bash
# Operations in CUDA mode: wsyncd with --metrics-listen and a notify socket of our own standing in
# for systemd, a colocated group fed two versions by the Qwen2 trainer, then the metrics (the NCCL
# library loaded, device memory held, updates and bucket phases), wsyncctl health and doctor (the
# GPU by UUID, NCCL's version), READY and WATCHDOG, and STOPPING at SIGTERM.
source tests/gpu/lib/common.sh
gpu_step ops "operations in CUDA mode: metrics, health, doctor, systemd notify"
need_gpus 1
sock=/tmp/wsync-gpu-ops.sock
log=$LOGS/ops.log
notify=$LOGS/notify.sock
python3 -c "
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1])
with open(sys.argv[2], 'a') as f:
    while True:
        f.write(s.recv(4096).decode().replace(chr(10), ' ') + chr(10)); f.flush()
" "$notify" "$LOGS/notify.txt" &
listener=$!
started_pids+=("$listener")
sleep 0.5
NOTIFY_SOCKET=$notify WATCHDOG_USEC=2000000 start_wsyncd $sock "$LOGS/wsyncd.log" \
  --slot-bytes 64MiB --bucket-timeout 60 --metrics-listen 127.0.0.1:19464 || fail=1
d=$wsyncd_pid
start_engine sglang 30051 0 "$LOGS/engine.log" || fail=1
ctl $sock "$log" create-group ops --transport ipc --engine "http://127.0.0.1:30051@GPU-$(gpu_uuid 0)"
trainer_push $sock "$log" 150 --group ops --engines http://127.0.0.1:30051 --versions 2 \
  --version-prefix ops-
curl -sf http://127.0.0.1:19464/metrics >"$OUT/ops-metrics.txt" || fail=1
for line in 'wsync_up{mode="cuda"} 1' 'wsync_nccl_library_info{' \
    'wsync_updates_total{group="ops",outcome="committed"} 2' \
    'wsync_bucket_phase_seconds_count{group="ops",phase="total"}' \
    'wsync_device_memory_held_bytes{device="0"}' 'wsync_engine_healthy{'; do
  grep -qF "$line" "$OUT/ops-metrics.txt" || { echo "metrics lack: $line"; fail=1; }
done
grep -E '^wsync_(up|nccl_library_info|updates_total|device_memory_held_bytes|engine_healthy)' \
  "$OUT/ops-metrics.txt" | tee -a "$log"
ctl $sock "$log" health || echo "health is not SERVING"
"$WSYNCCTL" --socket $sock doctor 2>&1 | tee "$OUT/ops-doctor.txt" | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "doctor failed a check"; fail=1; }
grep -qE "^GPUs +OK +[0-9]+ visible: " "$OUT/ops-doctor.txt" || fail=1
grep -qE "^NCCL +OK +.*2\.[0-9]+\.[0-9]+" "$OUT/ops-doctor.txt" || fail=1
stop_pids $d
sleep 0.5
cp "$LOGS/notify.txt" "$OUT/ops-notify.txt"
for msg in "READY=1" "WATCHDOG=1" "STOPPING=1"; do
  grep -q "^$msg" "$OUT/ops-notify.txt" || { echo "systemd never heard $msg"; fail=1; }
done
end_step
