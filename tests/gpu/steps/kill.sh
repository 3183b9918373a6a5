#!/usr/bin/env bash
# An engine killed mid-update: the update fails within the deadline naming it, wsyncd stays up,
# and a replacement engine recovers on the next update (the group forms again with it).
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step kill "engine killed mid-update: the update fails within the deadline; a replacement recovers"
start_policy
policy_push kill.log 150 --versions 1 --version-prefix before-kill-
policy_engine 0 --die-at-update 1 || fail=1
dying=$engine_pid
# A restarted engine lost its group: the group is made again so that the kill is mid-update.
policy_regroup kill.log
policy_push kill.log 120 --versions 1 --version-prefix killed- \
  --expect-failure "${policy_url[0]}"
timeout 30 tail --pid=$dying -f /dev/null
kill -9 $dying 2>/dev/null
wait $dying
echo "dying engine exit code: $? (17 = died as asked)" | tee -a "$LOGS/kill.log"
policy_engine_pids[0]=""
policy_engine 0 || fail=1
policy_push kill.log 120 --versions 2 --version-prefix after-kill-
alive $policy_wsyncd wsyncd
end_step
