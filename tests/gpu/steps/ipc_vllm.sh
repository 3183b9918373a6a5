#!/usr/bin/env bash
# Colocated, vLLM semantics: vLLM's simulator on GPU memory (tests/engines/vllm/vllm_engine.py,
# real torch: ipc_handles_pickled, args[6] replaced, packed chunks cut by tensor_sizes and
# cloned, start/finish sessions with 409 out of order) beside wsyncd and the trainer on GPU 0;
# 3 versions bit-identical in each request form: packed (--vllm-packed) and unpacked (the
# default).
source tests/gpu/lib/common.sh
gpu_step ipc_vllm "colocated vLLM (ipc): wsyncd (cuda) + vLLM torch engine + Qwen2 trainer on GPU 0"
need_gpus 1
sock=/tmp/wsync-gpu-vllm.sock
url=http://127.0.0.1:30032
log=$LOGS/vllm.log
start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 || fail=1
d=$wsyncd_pid
uuid=$(gpu_uuid 0)
echo "GPU 0 UUID $uuid" | tee "$log"
start_engine vllm 30032 0 "$LOGS/engine.log" || fail=1
for form in packed unpacked; do
  extra=()
  [[ $form == packed ]] && extra=(--vllm-packed)
  ctl $sock "$log" create-group "vllm-$form" --kind vllm --transport ipc "${extra[@]}" \
    --engine "$url@GPU-$uuid" || continue
  trainer_push $sock "$log" 150 --group "vllm-$form" --engines $url \
    --version-prefix "vllm-$form-" --versions 3 --expect-form "$form"
done
curl -s $url/sim/stats 2>&1 | tee -a "$log"
echo
alive $d wsyncd
grep -h "RESULT" "$log"
end_step
