#!/usr/bin/env bash
# The wsync demo on a machine without a GPU: wsyncd in host mode, two SGLang engine simulators
# (one with 2 TP ranks), and three consecutive versions of a synthetic ~1 GiB model pushed through
# the client. Exits 0 only if every engine rank ends up byte-identical to the trainer's last version.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${WSYNC_BUILD_DIR:-build}

command -v cmake >/dev/null && command -v ninja >/dev/null && dpkg -s libgrpc++-dev >/dev/null 2>&1 \
  || deploy/install-deps.sh
echo "== building"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target wsyncd wsyncctl wsync-push -- -j"$(nproc)" | tail -1

work=$(mktemp -d /tmp/wsync-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port_a=$(free_port)
port_b=$(free_port)
sock="$work/wsyncd.sock"

# SGLang's simulator on host memory: its ranks (one process each) join wsyncd's TCPStore and
# receive the broadcasts over the host collective. It runs on the system python3 (numpy).
sglang=(/usr/bin/python3 tests/engines/sglang/sglang_engine.py --memory host)
echo "== engines: sglang simulator tp=1 on :$port_a, tp=2 on :$port_b"
"${sglang[@]}" --port "$port_a" --tp 1 >"$work/engine-a.log" 2>&1 & pids+=($!)
"${sglang[@]}" --port "$port_b" --tp 2 >"$work/engine-b.log" 2>&1 & pids+=($!)
# wsyncd forms the config's group as it starts: the engines must be serving by then.
for port in "$port_a" "$port_b"; do
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
done

# The run's own state directory: a wsyncd started again after a crash finds the group there and
# re-forms it without an engine restart, and demo runs never share records, nor the default
# directory's lock with a wsyncd already running.
cat >"$work/wsyncd.json" <<JSON
{
  "mode": "host",
  "socket": "$sock",
  "slots": 2,
  "slot_bytes": "256MiB",
  "advertise_address": "127.0.0.1",
  "bind_address": "127.0.0.1",
  "state_dir": "$work/state",
  "groups": [
    {"name": "policy", "kind": "sglang", "device": 0,
     "engines": [{"url": "http://127.0.0.1:$port_a", "ranks": 1},
                 {"url": "http://127.0.0.1:$port_b", "ranks": 2}]}
  ]
}
JSON
echo "== wsyncd (host mode), config $work/wsyncd.json"
"$build/daemon/wsyncd" --config "$work/wsyncd.json" >"$work/wsyncd.log" 2>&1 & pids+=($!)

ctl() { "$build/client/wsyncctl" --socket "$sock" "$@"; }
for _ in $(seq 1 100); do
  ctl group policy 2>/dev/null | grep -q ', ready,' && break
  sleep 0.2
done
ctl group policy

echo "== pushing 3 versions of a ~1 GiB model (bf16, fp32, int64)"
rc=0
"$build/client/wsync-push" --socket "$sock" --group policy --model-gib 1 --versions 3 \
  --verify-sim || rc=$?

echo "== wsyncctl status"
ctl status
echo "== wsyncctl updates"
ctl updates
echo "== wsyncctl engines"
ctl engines
echo "== logs in $work"
exit $rc
