#!/usr/bin/env python3
"""A local stranger on SGLang's map-once route, as any user of the host can run one: it finds the
stream sockets a wsyncd binds in /proc/net/unix (world-readable), connects a REP socket to each
new one, as an engine rank does, and answers b"" to whatever it is sent, so that a REQ socket
that routes a frame to it takes the frame as loaded.

It prints "ready" once it is watching (after dropping to --uid, when given and run as root),
"refused PATH" each time wsyncd refuses it during a connection's handshake ("admitted PATH" when
it does not), and on SIGTERM (or
after --seconds) one JSON line: {"frames", "bytes", "sockets", "modes", "admitted", "refused"}:
the frames it took, their bytes, the sockets it found and connected to (ZMQ connects in the
background: a connect the file's mode refuses is retried, silently), the permission bits of
their files, and the handshakes that succeeded and that wsyncd refused.

  zmq_stranger.py --wsyncd-pid PID [--uid UID] [--seconds S] [--wait-signal]
"""

import argparse
import json
import os
import signal
import sys
import time

import zmq
from zmq.utils.monitor import recv_monitor_message


def bound_paths(prefix):
    """The unix socket paths in /proc/net/unix under `prefix`."""
    out = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith(prefix) and fields[7].endswith(".sock"):
                out.add(fields[7])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--wsyncd-pid", type=int, required=True,
                        help="take only this wsyncd's sockets (its directories are named "
                             "wsyncd-PID-...), so that tests running side by side stay apart")
    parser.add_argument("--uid", type=int, help="run as this user (needs root)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--wait-signal", action="store_true",
                        help="after \"ready\", take no socket until SIGUSR1 comes")
    args = parser.parse_args()
    if args.uid is not None:
        os.setgroups([])
        os.setgid(args.uid)
        os.setuid(args.uid)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    marker = f"/wsyncd-{args.wsyncd_pid}-"
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)
    poller = zmq.Poller()
    sockets = {}  # path -> REP socket
    frames = 0
    taken = 0
    modes = set()  # the sockets' files' permission bits
    monitors = {}  # monitor socket -> the path its socket connects to
    admitted = refused = 0
    armed = []
    signal.signal(signal.SIGUSR1, lambda *_: armed.append(True))
    print("ready", flush=True)
    deadline = time.monotonic() + args.seconds
    while args.wait_signal and not armed and not stop and time.monotonic() < deadline:
        time.sleep(0.005)
    while not stop and time.monotonic() < deadline:
        for path in bound_paths("/"):
            if marker not in path or path in sockets:
                continue
            try:
                modes.add(oct(os.stat(path).st_mode & 0o777))
            except OSError:
                pass
            sock = ctx.socket(zmq.REP)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, 5)
            monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED |
                                              zmq.EVENT_HANDSHAKE_FAILED_AUTH)
            sock.connect("ipc://" + path)
            sockets[path] = sock
            monitors[monitor] = path
            poller.register(sock, zmq.POLLIN)
            poller.register(monitor, zmq.POLLIN)
        for sock, _ in poller.poll(1):
            if sock in monitors:
                event = recv_monitor_message(sock)["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    admitted += 1
                    print("admitted", monitors[sock], flush=True)
                elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    refused += 1
                    print("refused", monitors[sock], flush=True)
                continue
            try:
                data = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                continue
            frames += 1
            taken += len(data)
            sock.send(b"")
    print(json.dumps({"frames": frames, "bytes": taken, "sockets": len(sockets),
                      "modes": sorted(modes), "admitted": admitted, "refused": refused}),
          flush=True)
    for sock in list(sockets.values()) + list(monitors):
        sock.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
