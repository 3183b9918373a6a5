#!/usr/bin/env bash
# One TP rank of a TP=2 engine killed mid-update, in a broadcast group with a TP=1 engine as well
# (3 receiving ranks): the update fails within the deadline and its error names the engine whose
# rank died; wsyncd stays up, and once the engines restart the next update commits bit-identical
# on every rank. Every engine of the group restarts, not only the one whose rank died: the other
# ranks of an aborted NCCL broadcast stay in their receive (NCCL fails no peer when rank 0 aborts)
# until their own process-group timeout, so they refuse to join again until then. That one dying
# rank stalls every engine of a direct group is what the node relay removes.
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step kill_tp "a TP rank killed mid-update in a TP=1 + TP=2 group: named; the next update commits"
need_gpus 4
start_policy
policy_push kill_tp.log 150 --versions 1 --version-prefix before-kill-
# Engine 1 (TP ranks on GPUs 2 and 3) again, its TP rank 1 dying at its 2nd bucket; the group is
# made again so that the kill lands mid-update.
policy_engine 1 --die-at-update 1 --die-rank 1 || fail=1
dying=$engine_pid
policy_regroup kill_tp.log
policy_push kill_tp.log 180 --versions 1 --version-prefix killed- \
  --expect-failure "${policy_url[1]}"
grep -q "rank 1: dying at update 1 as asked" "$LOGS/engine1.log" ||
  { echo "the TP rank did not die as asked"; fail=1; }
stop_pids "$dying"
policy_engine_pids[1]=""
policy_engine 0 || fail=1
policy_engine 1 || fail=1
policy_push kill_tp.log 150 --versions 2 --version-prefix after-kill-
alive $policy_wsyncd wsyncd
end_step
