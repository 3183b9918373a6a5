#!/usr/bin/env bash
# A colocated group's quorum over real CUDA IPC: three torch engine ranks on GPU 0, quorum 2; the
# middle engine dies at its 2nd bucket. The update goes on without it and commits on the other
# two, bit-identical; wsyncctl names the dead one as needing a full version.
source tests/gpu/lib/common.sh
gpu_step quorum "colocated quorum: 3 torch engines on GPU 0, one dies mid-update"
need_gpus 1
sock=/tmp/wsync-gpu-quorum.sock
log=$LOGS/quorum.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
uuid=$(gpu_uuid 0)
engines=()
for port in 30061 30062 30063; do
  extra=()
  [[ $port == 30062 ]] && extra=(--die-at-update 1)
  start_engine sglang $port 0 "$LOGS/engine-$port.log" "${extra[@]}" || fail=1
  engines+=(--engine "http://127.0.0.1:$port@GPU-$uuid")
done
ctl $sock "$log" create-group q --transport ipc --quorum 2 "${engines[@]}"
trainer_push $sock "$log" 150 --group q --engines http://127.0.0.1:30061,http://127.0.0.1:30063 \
  --versions 1 --version-prefix quorum-
grep -qF "('http://127.0.0.1:30062', False)" "$log" || { echo "the dead engine is not named"; fail=1; }
"$WSYNCCTL" --socket $sock --json engines >"$LOGS/engines.json"
python3 -c "
import json, sys
rows = {e['url']: e['needs_full_version'] for e in json.load(open(sys.argv[1]))['engines']}
print(rows)
sys.exit(0 if rows == {'http://127.0.0.1:30061': False, 'http://127.0.0.1:30062': True,
                       'http://127.0.0.1:30063': False} else 1)" "$LOGS/engines.json" 2>&1 |
  tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
alive $d wsyncd
end_step
