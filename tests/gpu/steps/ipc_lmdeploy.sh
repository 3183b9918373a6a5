#!/usr/bin/env bash
# Colocated, LMDeploy semantics: LMDeploy's simulator on GPU memory (tests/engines/lmdeploy/
# lmdeploy_engine.py, real torch: update_params after PR #4397, the flattened_tensor cached until
# finished, require_clone false, the event waited on and recorded) beside wsyncd and the trainer
# on GPU 0. Both load formats, 3 versions bit-identical; flattened_tensor must come once per
# version, GPU and dtype (the slots are regions of one allocation per GPU; counted by the engine,
# recorded in $OUT/lmdeploy_flattened.jsonl); an engine killed mid-update fails the update, a
# fresh one then takes the next; a server refusing pickles (PR #4964) is a configuration error.
source tests/gpu/lib/common.sh
gpu_step ipc_lmdeploy "colocated LMDeploy (ipc): wsyncd (cuda) + LMDeploy torch engine + Qwen2 trainer on GPU 0"
need_gpus 1
sock=/tmp/wsync-gpu-lmdeploy.sock
url=http://127.0.0.1:30021
log=$LOGS/lmdeploy.log
record=$OUT/lmdeploy_flattened.jsonl
rm -f "$record"
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
start_engine lmdeploy 30021 0 "$LOGS/engine.log" || fail=1
uuid=$(gpu_uuid 0)
echo "GPU 0 UUID $uuid" | tee "$log"
push() {
  trainer_push $sock "$log" 150 --group "$1" --engines "${push_url:-$url}" \
    --version-prefix "$1-" "${@:2}"
}
for format in flattened_bucket per_tensor; do
  ctl $sock "$log" create-group "lmd-$format" --kind lmdeploy --transport ipc \
    --load-format "$format" --engine "$url@GPU-$uuid"
done
push lmd-flattened_bucket --versions 3 --flattened-record "$record"
push lmd-per_tensor --versions 3
curl -s $url/sim/checksums | python3 -c "import json,sys; d=json.load(sys.stdin); \
print('engine:', {k: d[k] for k in ('updates_received', 'flattened_tensor_sent', 'finished_calls', \
'casts', 'loads_while_asleep', 'is_sleeping', 'last_error')}); print('events:', d['events'][-12:])" \
  2>&1 | tee -a "$log"
# Killed mid-update: its ranks exit at the 2nd /update_weights. The update fails naming the
# engine, wsyncd stays up, and a fresh engine on the same port takes the next two versions.
stop_pids $engine_pid
start_engine lmdeploy 30021 0 "$LOGS/engine-dies.log" --die-at-update 1 || fail=1
push lmd-flattened_bucket --versions 1 --version-prefix killed- --expect-failure 30021
timeout 30 tail --pid="$engine_pid" -f /dev/null
stop_pids $engine_pid
start_engine lmdeploy 30021 0 "$LOGS/engine2.log" || fail=1
push lmd-flattened_bucket --versions 2 --version-prefix after-kill- --flattened-record "$record"
# PR #4964 without LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1: refused, named, not retried.
start_engine lmdeploy 30022 0 "$LOGS/engine-refuses.log" --refuse-pickle || fail=1
ctl $sock "$log" create-group lmd-refuse --kind lmdeploy --transport ipc \
  --engine "http://127.0.0.1:30022@GPU-$uuid"
push_url=http://127.0.0.1:30022 push lmd-refuse --versions 1 \
  --expect-failure LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS
alive $d wsyncd
note=""
if [[ -f $record ]]; then
  note=$(python3 -c "import json; rows = [json.loads(l) for l in open('$record')]; \
print('flattened_tensor per version/GPU/dtype: ' + ', '.join(f\"{r['arrivals']}/{r['floor']}\" \
for r in rows) + ' (arrivals/layout floor)')")
fi
grep -h "RESULT" "$log"
end_step "$note"
