#!/usr/bin/env bash
# An NCCL version mismatch: wsyncd on the system's NCCL, the engine on torch's. The update must
# fail naming NCCL, never hang or corrupt.
source tests/gpu/lib/common.sh
gpu_step mismatch "NCCL version mismatch: wsyncd on the system NCCL, engine on torch's"
need_gpus 2
sys_nccl=$(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2* 2>/dev/null | head -1)
if [[ -z $sys_nccl ]]; then
  echo "SKIP: no system libnccl.so.2 beside torch's"
  exit 77
fi
same=$(python3 -c "import ctypes,sys; v=[ctypes.c_int() for _ in (0,1)]
for i,p in enumerate(sys.argv[1:]): ctypes.CDLL(p).ncclGetVersion(ctypes.byref(v[i]))
print(int(v[0].value == v[1].value))" "$sys_nccl" "$NCCL_LIB")
if [[ $same == 1 ]]; then
  echo "SKIP: the system's NCCL and torch's are the same version"
  exit 77
fi
sock=/tmp/wsync-gpu-mismatch.sock
log=$LOGS/mismatch.log
NCCL_LIB=$sys_nccl start_wsyncd $sock "$LOGS/wsyncd.log" --slot-bytes 64MiB --bucket-timeout 60 ||
  fail=1
d=$wsyncd_pid
start_engine sglang 30003 1 "$LOGS/engine.log" || fail=1
ctl $sock "$log" create-group policy --engine "http://127.0.0.1:30003#1"
trainer_push $sock "$log" 120 --engines http://127.0.0.1:30003 --versions 1 --expect-failure "NCCL"
alive $d wsyncd
end_step
