"""What the engine simulators share (tests/engines/<kind>/<kind>_engine.py): an exact-name
unpickler over the rank's torch (real, or host_torch.py's stand-in), one process per TP rank,
the parameters (made at first sight, then copied into, as load_weights does), their checksums
and the digest the trainer compares, the arrival-order lock of the engines' update handlers, and
the JSON reply helpers of a BaseHTTPRequestHandler. Pure stdlib at import time: torch, or its
stand-in, is imported inside the rank processes (memory.py), so the servers start without it.
"""

import io
import json
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import zlib
from http.server import ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory as memories  # noqa: E402

# Every dtype common/dtype.h knows, as torch attribute names.
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32",
               "int64", "bool", "float8_e4m3fn", "float8_e5m2")


def exact_name_unpickler(torch, rebuild, storages=("TypedStorage",), extra=None,
                         refusal="is forbidden"):
    """A pickle.Unpickler class over `torch` (the rank's memory backend's) that resolves exactly
    these (module, name) pairs: torch.multiprocessing.reductions.rebuild_cuda_tensor (to
    `rebuild`), torch.Tensor, torch.Size, torch.storage.<each of `storages`>, torch.<dtype> for
    DTYPE_NAMES, and `extra` ({(module, name): object}). Anything else raises
    pickle.UnpicklingError."""
    allowed = {
        ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): rebuild,
        ("torch", "Tensor"): torch.Tensor,
        ("torch", "Size"): torch.Size,
    }
    for storage in storages:
        allowed[("torch.storage", storage)] = getattr(torch.storage, storage)
    for name in DTYPE_NAMES:
        if hasattr(torch, name):
            allowed[("torch", name)] = getattr(torch, name)
    allowed.update(extra or {})

    class ExactNameUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(f"Global '{module}.{name}' {refusal}")
            return allowed[(module, name)]

    return ExactNameUnpickler


def unpickle(data, unpickler_cls):
    return unpickler_cls(io.BytesIO(data)).load()


def tensor_crc(memory, t):
    """CRC-32 of a tensor's bytes, as trainer_push.py computes it."""
    return format(zlib.crc32(memory.tensor_bytes(t)), "08x")


def digest_of(crcs):
    """One digest of a whole parameter set: CRC-32 of the sorted 'name=crc' lines. Equal digests
    on both sides mean equal names and equal bytes (up to CRC-32's strength)."""
    text = "".join(f"{name}={crcs[name]}\n" for name in sorted(crcs))
    return format(zlib.crc32(text.encode()), "08x")


def _rank_entry(target, *args):
    """A rank process dies with its server (PR_SET_PDEATHSIG), as the engines' workers do when
    their server is killed: a rank left behind would keep a collective open."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(0)  # the server died before the hook was set
    target(*args)


class RankPool:
    """One process per TP rank (spawned, like the engines' workers), each running
    target(gpu, tp_rank, conn, *args) and answering (ok, value) per command."""

    def __init__(self, target, gpus, *args):
        ctx = mp.get_context("spawn")
        # One command at a time over the pipes: the HTTP server's threads (an update, a checksum
        # request, a group's init) would otherwise interleave their messages on a rank's pipe.
        self.lock = threading.Lock()
        self.ranks = []
        for tp_rank, gpu in enumerate(gpus):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_rank_entry, args=(target, gpu, tp_rank, child) + tuple(args),
                            daemon=True)
            p.start()
            self.ranks.append((p, parent))

    def __len__(self):
        return len(self.ranks)

    def all(self, cmd, arg=None):
        """Sends the command to every rank and returns their answers in rank order. A rank that
        died takes the engine with it, as a crashed worker takes down its server."""
        with self.lock:
            for _, conn in self.ranks:
                conn.send((cmd, arg))
            try:
                return [conn.recv() for _, conn in self.ranks]
            except EOFError:
                # Which rank, and how (a negative exit code is the signal that ended it: a
                # crash in CUDA or NCCL leaves no Python traceback).
                for tp_rank, (p, _) in enumerate(self.ranks):
                    p.join(timeout=1)
                    print(f"rank {tp_rank} (pid {p.pid}) running {cmd}: exit code {p.exitcode}",
                          flush=True)
                print("a rank process died: the engine exits", flush=True)
                os._exit(17)


def rank_checksums(memory, params, crcs):
    """Fills `crcs` (name -> crc) for `params` where stale; returns it."""
    if len(crcs) != len(params) or set(crcs) != set(params):
        crcs.clear()
        for name, t in params.items():
            crcs[name] = tensor_crc(memory, t)
    return crcs


def serve_rank(conn, commands):
    """A rank process's loop: each (cmd, arg) the server sends runs commands[cmd](arg), answered
    (True, its value), or (False, "Type: message") when it raises, as the engines fail the
    request a worker's exception ends. The loop ends at "exit" or when the server is gone."""
    while True:
        try:
            cmd, arg = conn.recv()
        except EOFError:
            return
        if cmd == "exit":
            conn.send((True, "bye"))
            return
        try:
            conn.send((True, commands[cmd](arg)))
        except Exception as e:  # noqa: BLE001 - reported to the HTTP side
            traceback.print_exc()
            conn.send((False, f"{type(e).__name__}: {e}"))


def ranks_and_stats(engine):
    """Every rank's checksums by its global rank (engine.rank_offset + its index), their digests,
    and each rank's answer to "stats"; taken between weight updates (engine.lock)."""
    with engine.lock:
        res = engine.ranks.all("checksums")
        stats = [v for ok, v in engine.ranks.all("stats") if ok]
    ranks = {str(engine.rank_offset + i): c for i, (ok, c) in enumerate(res) if ok}
    return ranks, {r: digest_of(c) for r, c in ranks.items()}, stats


def count_update(engine):
    """The next weight update's index: engine.updates, counted under engine.state."""
    with engine.state:
        index = engine.updates
        engine.updates += 1
    return index


def next_update(engine, exit_code=17):
    """The next weight update's index (count_update), once the faults engine.knobs put on it
    have run: at die_at_update the server exits (`exit_code`), at hang_update_at the request
    never answers."""
    index = count_update(engine)
    if index == engine.knobs["die_at_update"]:
        print(f"{stamp()} dying at update {index} as asked", flush=True)
        os._exit(exit_code)
    if index == engine.knobs["hang_update_at"]:
        time.sleep(3600)
    return index


def sleep_params(mem, params, level):
    """The weights put to sleep: moved to host memory (level 1) or dropped (level 2), the device
    synchronised and its cache emptied."""
    torch = mem.torch
    torch.cuda.synchronize()
    if level == 2:
        params.clear()
    else:
        for name in list(params):
            params[name] = params[name].to("cpu")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def wake_params(mem, params, gpu):
    """The sleeping weights moved back to the rank's GPU."""
    for name in list(params):
        params[name] = params[name].to(f"cuda:{gpu}")
    mem.torch.cuda.synchronize()


def add_engine_flags(parser, rank_word="TP rank"):
    """The flags every engine simulator takes: --port, --gpus, --memory, the routes its OpenAPI
    document leaves out and the answers' delivery."""
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gpus",
                        help=f"comma-separated device index (host memory: or stand-in GPU UUID) "
                             f"per {rank_word}")
    parser.add_argument("--tp", type=int, default=0,
                        help=f"instead of --gpus: this many {rank_word}s on devices 0..N-1 "
                             f"(neither: one)")
    parser.add_argument("--memory", choices=memories.KINDS, default="cuda",
                        help="where the ranks keep tensors: host (shared memory, no torch) or "
                             "cuda")
    parser.add_argument("--unlisted-route", action="append", default=[],
                        help="a route served but left out of /openapi.json, as by a gateway in "
                             "front that publishes a document of its own (repeatable)")
    Delivery.add_flags(parser)


def gpus_of(args):
    if args.gpus is None:
        return list(range(max(args.tp, 1)))
    return [memories.device_of(g) for g in args.gpus.split(",") if g]


def serve(handler, args, banner):
    """Serves `handler` on 127.0.0.1:--port until SIGTERM, its answers delivered as the flags
    say."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # A server dies with whatever started it (a test, a step script): a test that crashes or is
    # stopped by a sanitizer never stops its engines, and an engine left running keeps the test
    # runner's output pipe open, so the runner waits on it until its own timeout.
    parent = os.getppid()

    def exit_with_parent():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True).start()
    handler.delivery = Delivery()
    handler.delivery.from_flags(args)
    if args.http10:
        # BaseHTTPRequestHandler then answers "HTTP/1.0" and closes after each answer.
        handler.protocol_version = "HTTP/1.0"
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    server.daemon_threads = True
    print(f"{banner} ({args.memory} memory) on :{server.server_address[1]}, gpus "
          f"{args.gpus or args.tp}, pid {os.getpid()}", flush=True)
    server.serve_forever()


def flip_first_byte(mem, t):
    """The first byte of a tensor, inverted in place (weights that differ from the trainer's)."""
    if mem.kind == "host":
        t.raw[0] ^= 0xFF  # raw starts at the tensor's first byte
    else:
        b = t.view(-1).view(mem.torch.uint8)
        b[0] = b[0] ^ 0xFF


def load_weights(params, received):
    """Copies into the parameters (made at first sight), as load_weights does."""
    for name, t in received:
        p = params.get(name)
        if p is None or p.shape != t.shape or p.dtype != t.dtype:
            params[name] = t.clone()
        else:
            p.copy_(t)


class FifoLock:
    """A lock handed over in arrival order, as the engines' asyncio locks are (threading.Lock is
    not)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.next_ticket = 0
        self.serving = 0

    def __enter__(self):
        with self.cond:
            ticket = self.next_ticket
            self.next_ticket += 1
            self.cond.wait_for(lambda: self.serving == ticket)

    def __exit__(self, *exc):
        with self.cond:
            self.serving += 1
            self.cond.notify_all()


def stamp():
    now = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1e3) % 1000:03d}"


class Delivery:
    """How answers go out, by route ("*": every route; /sim/ routes never): an oversized chunked
    body (a JSON string that never closes, `oversize_mib` MiB or, at 0, until the client hangs
    up), or an answer trickled one byte every `trickle_ms` ms. Set by flags or POST /sim/knobs,
    as the scripted C++ servers' SimDeliveryKnobs (tests/sim/sim_http_server.h)."""

    def __init__(self):
        self.oversize_routes, self.oversize_mib = [], 0
        self.trickle_routes, self.trickle_ms = [], 0
        # Answers per connection before one says `Connection: close` (0: never), as servers with a
        # keep-alive request limit and many proxies do; --http-1.0 closes after every answer.
        self.close_after = 0

    def update(self, knobs):
        for key in ("oversize_routes", "oversize_mib", "trickle_routes", "trickle_ms",
                    "close_after"):
            if key in knobs:
                setattr(self, key, knobs.pop(key))

    @staticmethod
    def add_flags(parser):
        parser.add_argument("--oversize-route", action="append", default=[],
                            help='a route ("*": every one) that answers an oversized body')
        parser.add_argument("--oversize-mib", type=int, default=0,
                            help="the oversized body's size in MiB (0: endless)")
        parser.add_argument("--trickle-route", action="append", default=[],
                            help='a route ("*": every one) whose answers go one byte at a time')
        parser.add_argument("--trickle-ms", type=int, default=0,
                            help="milliseconds between a trickled answer's bytes")
        parser.add_argument("--http-1.0", dest="http10", action="store_true",
                            help="answer as HTTP/1.0, closing the connection after each answer")
        parser.add_argument("--close-after", type=int, default=0,
                            help="answers per connection, the last with Connection: close "
                                 "(0: keep connections open)")

    def from_flags(self, args):
        self.oversize_routes, self.oversize_mib = args.oversize_route, args.oversize_mib
        self.trickle_routes, self.trickle_ms = args.trickle_route, args.trickle_ms
        self.close_after = args.close_after

    def names(self, routes, path):
        return not path.startswith("/sim/") and ("*" in routes or path in routes)


class JsonReplies:
    """Reply helpers for a BaseHTTPRequestHandler (mixed in before it). Keep-alive with
    TCP_NODELAY, as uvicorn serves the engines. `delivery` (a Delivery) shapes the answers."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    delivery = None
    # The most requests that ever waited at once on one connection (arrived, not yet answered),
    # seen when an answer goes out: 2 when the client sent the next request before this answer
    # (it pipelines), else 1. The server reads one request at a time, so 2 is the most it sees.
    max_waiting = 0

    def log_message(self, fmt, *args):
        pass

    def next_request_arrived(self):
        """Whether bytes of another request sit on this connection already (never blocks)."""
        sock = self.connection
        timeout = sock.gettimeout()
        try:
            sock.settimeout(0.0)
            return len(self.rfile.peek(1)) > 0
        except (BlockingIOError, OSError, ValueError):
            return False
        finally:
            try:
                sock.settimeout(timeout)
            except OSError:
                pass

    def send(self, status, body, content_type="application/json"):
        path = self.path.split("?", 1)[0]
        waiting = 2 if self.next_request_arrived() else 1
        if waiting > JsonReplies.max_waiting:
            JsonReplies.max_waiting = waiting
        d = self.delivery
        if d is not None and d.names(d.oversize_routes, path):
            return self.send_oversized(status, content_type, d.oversize_mib)
        if d is not None and d.names(d.trickle_routes, path):
            reason = self.responses.get(status, ("",))[0]
            text = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            try:
                for i in range(len(text)):
                    self.wfile.write(text[i:i + 1])
                    self.wfile.flush()
                    time.sleep(max(d.trickle_ms, 1) / 1000)
            except OSError:
                self.close_connection = True
            return
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.answers_sent = getattr(self, "answers_sent", 0) + 1  # one handler per connection
        if d is not None and d.close_after and self.answers_sent >= d.close_after:
            # Sets close_connection too: whatever the client pipelined behind is never read.
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def send_oversized(self, status, content_type, mib):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"100000\r\n\"" + b"x" * ((1 << 20) - 1) + b"\r\n"
        sent = 0
        try:
            while mib == 0 or sent < mib:
                self.wfile.write(chunk)
                sent += 1
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def reply(self, status, obj):
        self.send(status, json.dumps(obj).encode())

    def raw_body(self):
        n = int(self.headers.get("Content-Length", 0) or 0)
        return self.rfile.read(n) if n else b""
