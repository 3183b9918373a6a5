# shellcheck shell=bash
# The disaggregated setup the broadcast steps share: wsyncd in CUDA mode on GPU 0 as NCCL rank 0,
# a torch engine with SGLang semantics on GPU 1 (and a second one with TP ranks on GPUs 2 and 3
# when there are 4+ GPUs), and group "policy" over them. Sourced after common.sh:
#   start_policy [create-group options...]   # sets policy_sock, policy_engines, policy_wsyncd
#   policy_push LOG TIMEOUT_S trainer_push.py-args...
#   policy_regroup LOG [create-group options...]
# Every policy step uses these ports and socket; a runner lane (WSYNC_GPU_LANE) gets its own, so
# that two lanes can run policy steps at once.
policy_lane=${WSYNC_GPU_LANE:-0}
policy_sock=/tmp/wsync-gpu-policy$policy_lane.sock
# policy_url[i]: engine i's URL.
policy_url=("http://127.0.0.1:$((30001 + 1000 * policy_lane))"
  "http://127.0.0.1:$((30002 + 1000 * policy_lane))")
policy_engines=${policy_url[0]}
policy_spec=(--engine "${policy_url[0]}#1")
policy_engine_pids=()

# policy_engine INDEX [engine options...]: (re)starts engine INDEX (0: GPU 1; 1: GPUs 2,3).
policy_engine() {
  local i=$1
  shift
  local gpus=1
  [[ $i == 1 ]] && gpus=2,3
  [[ -n ${policy_engine_pids[$i]:-} ]] && stop_pids "${policy_engine_pids[$i]}"
  start_engine sglang "${policy_url[$i]##*:}" $gpus "$LOGS/engine$i.log" "$@"
  local rc=$?
  policy_engine_pids[$i]=$engine_pid
  return $rc
}

start_policy() {
  need_gpus 2
  if [[ $ngpu -ge 4 ]]; then
    policy_engines="$policy_engines,${policy_url[1]}"
    policy_spec+=(--engine "${policy_url[1]}#2")
  fi
  start_wsyncd $policy_sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
  policy_wsyncd=$wsyncd_pid
  policy_engine 0 || fail=1
  if [[ $ngpu -ge 4 ]]; then policy_engine 1 || fail=1; fi
  ctl $policy_sock "$LOGS/create-group.log" create-group policy "$@" "${policy_spec[@]}"
}
policy_push() {
  local log=$1 limit=$2
  shift 2
  trainer_push $policy_sock "$LOGS/$log" "$limit" --engines "$policy_engines" "$@"
}
policy_regroup() {
  local log=$1
  shift
  ctl $policy_sock "$LOGS/$log" destroy-group policy
  ctl $policy_sock "$LOGS/$log" create-group policy "$@" "${policy_spec[@]}"
}
