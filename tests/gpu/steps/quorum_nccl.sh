#!/usr/bin/env bash
# The quorum policy over real NCCL: three TP=1 engines (GPUs 1-3) in a broadcast group with quorum
# 2. The middle engine is down when the group forms: the group forms without it, ranks renumbered
# (the third engine becomes rank 2), and each update commits bit-identical on the two. Once the
# engine is up, the group takes it back (it forms again over all three) and the next update
# commits on all three. Then it dies between updates: the next update forms without it again and
# commits on the other two. (An engine that dies mid-update breaks the broadcast for every engine
# of the group; kill_tp shows that case.)
source tests/gpu/lib/common.sh
gpu_step quorum_nccl "broadcast quorum: 3 engines, one absent then back then killed mid-update"
need_gpus 4
sock=/tmp/wsync-gpu-quorum-nccl.sock
log=$LOGS/quorum_nccl.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
start_engine sglang 30101 1 "$LOGS/engine-30101.log" || fail=1
start_engine sglang 30103 3 "$LOGS/engine-30103.log" || fail=1
spec=(--engine "http://127.0.0.1:30101" --engine "http://127.0.0.1:30102"
  --engine "http://127.0.0.1:30103")
ctl $sock "$log" create-group q --quorum 2 "${spec[@]}"
two=http://127.0.0.1:30101,http://127.0.0.1:30103
trainer_push $sock "$log" 150 --group q --engines $two --versions 2 --version-prefix two-
"$WSYNCCTL" --socket $sock groups 2>&1 | tee -a "$log"
# Renumbered: the third engine joined as rank 2 (SGLang ranks are rank_offset + tp_rank).
grep -q "rank 2 = http://127.0.0.1:30103" "$LOGS/wsyncd.log" ||
  { echo "the group did not form as ranks 1-2 over the two engines"; fail=1; }
# Back: the middle engine starts; the group's watcher sees it answer and the next update forms
# over all three.
start_engine sglang 30102 2 "$LOGS/engine-30102.log" || fail=1
middle=$engine_pid
sleep 8
all=http://127.0.0.1:30101,http://127.0.0.1:30102,http://127.0.0.1:30103
trainer_push $sock "$log" 150 --group q --engines $all --versions 2 --version-prefix three-
grep -q "rank 2 = http://127.0.0.1:30102, rank 3 = http://127.0.0.1:30103" "$LOGS/wsyncd.log" ||
  { echo "the group did not form again over all three engines"; fail=1; }
# Dies between updates (kill -9): the next update forms without it, renumbered, and commits.
kill -9 "$middle"
wait "$middle" 2>/dev/null
trainer_push $sock "$log" 150 --group q --engines $two --versions 2 --version-prefix after-
[[ $(grep -c "rank 2 = http://127.0.0.1:30103" "$LOGS/wsyncd.log") -ge 2 ]] ||
  { echo "the group did not form again over the two engines"; fail=1; }
"$WSYNCCTL" --socket $sock --json engines >"$LOGS/engines.json" 2>>"$log"
python3 -c "
import json, sys
rows = {e['url']: e['needs_full_version'] for e in json.load(open(sys.argv[1]))['engines']}
print(rows)
sys.exit(0 if rows.get('http://127.0.0.1:30101') is False and
         rows.get('http://127.0.0.1:30103') is False else 1)" "$LOGS/engines.json" 2>&1 |
  tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fail=1
alive $d wsyncd
end_step
