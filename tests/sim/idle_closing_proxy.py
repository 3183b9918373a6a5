"""A TCP proxy in front of an engine that closes any connection idle for --idle-ms, as load
balancers, ingresses and service meshes do with keep-alive connections (usually after 60 s or so;
shorter here so that a test sees it between two updates). Bytes pass through unchanged.

Usage: idle_closing_proxy.py --port P --upstream-port U --idle-ms MS
It prints one line per connection it accepts and per one it closed for idleness.
"""

import argparse
import selectors
import signal
import socket
import sys
import threading
import time


def pump(client, upstream, idle_s):
    """Copies bytes both ways until either side closes or nothing moves for idle_s seconds."""
    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_READ, upstream)
    sel.register(upstream, selectors.EVENT_READ, client)
    last = time.monotonic()
    try:
        while True:
            events = sel.select(timeout=max(idle_s - (time.monotonic() - last), 0.01))
            if not events:
                if time.monotonic() - last >= idle_s:
                    print(f"closed a connection idle for {idle_s * 1000:.0f} ms", flush=True)
                    return
                continue
            for key, _ in events:
                data = key.fileobj.recv(1 << 16)
                if not data:
                    return
                key.data.sendall(data)
                last = time.monotonic()
    except OSError:
        return
    finally:
        sel.close()
        for s in (client, upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--idle-ms", type=int, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.create_server(("127.0.0.1", args.port))
    print(f"proxy :{args.port} -> :{args.upstream_port}, idle close {args.idle_ms} ms", flush=True)
    while True:
        client, _ = listener.accept()
        print("accepted a connection", flush=True)
        try:
            upstream = socket.create_connection(("127.0.0.1", args.upstream_port))
        except OSError:
            client.close()
            continue
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(client, upstream, args.idle_ms / 1000),
                         daemon=True).start()


if __name__ == "__main__":
    main()
