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

# The node relay: the wsyncd above stands for the trainer's node; a second wsyncd stands for a
# rollout node with an engine of its own, subscribed over TLS with a relay token and fed over
# the host collective between the daemons.
echo "== node relay: a second wsyncd (node rollout-1) fed by a relay group of the first"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
  -keyout "$work/key.pem" -out "$work/cert.pem" >/dev/null 2>&1
head -c 24 /dev/urandom | base64 >"$work/trainer.token"
head -c 24 /dev/urandom | base64 >"$work/relay.token"
up_port=$(free_port)
up_sock="$work/upstream.sock"
cat >"$work/upstream.json" <<JSON
{
  "mode": "host", "socket": "$up_sock", "listen": "127.0.0.1:$up_port",
  "tls_cert": "$work/cert.pem", "tls_key": "$work/key.pem", "token_file": "$work/trainer.token",
  "relay_tokens": [{"token_file": "$work/relay.token", "groups": ["policy"]}],
  "slots": 2, "slot_bytes": "256MiB", "bind_address": "127.0.0.1", "state_dir": "$work/up-state",
  "groups": [{"name": "policy", "kind": "wsyncd", "transport": "relay",
              "engines": [{"url": "wsyncd://rollout-1"}]}]
}
JSON
port_c=$(free_port)
"${sglang[@]}" --port "$port_c" --tp 2 >"$work/engine-c.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port_c") 2>/dev/null && break
  sleep 0.1
done
down_sock="$work/rollout-1.sock"
cat >"$work/rollout-1.json" <<JSON
{
  "mode": "host", "socket": "$down_sock", "slots": 2, "slot_bytes": "256MiB",
  "bind_address": "127.0.0.1", "state_dir": "$work/rollout-1-state", "resident": "host",
  "groups": [{"name": "policy", "kind": "sglang",
              "engines": [{"url": "http://127.0.0.1:$port_c", "ranks": 2}]}],
  "relay_feeds": [{"upstream": "127.0.0.1:$up_port", "group": "policy", "node": "rollout-1",
                   "token_file": "$work/relay.token", "ca_file": "$work/cert.pem",
                   "server_name": "localhost"}]
}
JSON
"$build/daemon/wsyncd" --config "$work/upstream.json" >"$work/upstream.log" 2>&1 & pids+=($!)
"$build/daemon/wsyncd" --config "$work/rollout-1.json" >"$work/rollout-1.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do
  grep -q "relay: subscribed" "$work/rollout-1.log" 2>/dev/null && break
  sleep 0.2
done
echo "== pushing 3 versions to the trainer node's relay group, each 1% of elements apart;"
echo "   checked on rollout-1's engine"
"$build/client/wsync-push" --socket "$up_sock" --group policy --model-gib 0.25 --versions 3 \
  --changed-fraction 0.01 --verify-sim --verify-engine "http://127.0.0.1:$port_c" || rc=$?
echo "== bytes on the relay: rollout-1 keeps the last version, so v2 and v3 cross as deltas"
grep -o "version '[^']*' sent .*" "$work/upstream.log" || rc=1
echo "== wsyncctl relay (trainer node)"
"$build/client/wsyncctl" --socket "$up_sock" relay
echo "== wsyncctl relay (rollout-1)"
"$build/client/wsyncctl" --socket "$down_sock" relay
echo "== logs in $work"
exit $rc
