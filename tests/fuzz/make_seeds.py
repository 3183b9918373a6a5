#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpora (tests/fuzz/corpus/<target>/seed-*).

Each seed is what the target's input format makes of real traffic: torch's TCPStore handshake and
commands, SGLang's answers, wsyncd's config files and group records. Inputs that once broke a
target are kept as regression-* files, and inputs the fuzzers found that add coverage (merged
with run_fuzzers.sh --merge) sit beside them with libFuzzer's hash names. Run from anywhere;
rewrites only the seed-* files.
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- store_protocol: records of (op, operands); see store_protocol_fuzzer.cc --------------------


def u64(v):
    return struct.pack("<Q", v)


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return u64(len(b)) + b


VALIDATE = b"\x00" + struct.pack("<I", 0x3C85F7CE)


def frame(cmd, *parts):
    return bytes([cmd]) + b"".join(parts)


def arrive(conn, data):
    """Bytes arriving on connection `conn`, in records of at most 255 bytes."""
    out = b""
    for i in range(0, len(data), 255):
        piece = data[i:i + 255]
        out += bytes([conn % 4]) + bytes([len(piece)]) + piece
    return out


def daemon_set(key, value):
    key, value = key.encode(), value
    return bytes([5 * 4]) + bytes([len(key)]) + key + bytes([len(value)]) + value


ID_KEY = "/g/g//cuda//0"
torch_rank = (VALIDATE + frame(13, struct.pack("<I", 4242)) + frame(4, s("init/"), u64(1)) +
              frame(6, u64(1), s(ID_KEY)))
write("store_protocol", "torch-rank-waits-then-daemon-sets-id",
      arrive(0, torch_rank) + daemon_set(ID_KEY, b"\x01" * 128) + arrive(0, frame(3, s(ID_KEY))))
write("store_protocol", "two-ranks-register",
      arrive(0, torch_rank) + arrive(1, torch_rank) + bytes([7 * 4]) + bytes([4 * 4 + 1]))
every = (VALIDATE + frame(1, s("/a"), s("1")) + frame(2, s("/a"), s("1"), s("2")) +
         frame(3, s("/a")) + frame(4, s("/n"), u64(5)) + frame(5, u64(2), s("/a"), s("/n")) +
         frame(7) + frame(8, s("/a")) + frame(9, s("/b"), s("xy")) +
         frame(10, u64(2), s("/b"), s("/n")) + frame(11, u64(2), s("/c"), s("3"), s("/d"), s("4")) +
         frame(6, u64(1), s("/later")) + frame(12) + frame(13, struct.pack("<I", 7)))
write("store_protocol", "every-command", arrive(2, every))
# The same commands split a byte at a time.
write("store_protocol", "bytewise",
      b"".join(bytes([3]) + b"\x01" + bytes([c]) for c in (VALIDATE + frame(1, s("/k"), s("v")))))
write("store_protocol", "not-torch", arrive(0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
write("store_protocol", "oversize-value", arrive(0, VALIDATE + frame(1, s("/k"), u64(1 << 20))))
# With the rank prefix "/g/" ('P'): two strangers ADD "init/" and wait for keys first, then the
# engine's two ranks connect and fetch the id, which makes them ranks.
stranger = (VALIDATE + frame(13, struct.pack("<I", 9)) + frame(4, s("init/"), u64(1)) +
            frame(6, u64(1), s("/policy/policy//cuda//0")))
write("store_protocol", "prefix-strangers-first",
      b"P" + daemon_set(ID_KEY, b"\x01" * 128) + arrive(0, stranger) + arrive(1, stranger) +
      arrive(2, torch_rank + frame(3, s(ID_KEY))) + arrive(3, torch_rank + frame(3, s(ID_KEY))) +
      bytes([7 * 4]) + bytes([4 * 4 + 0]) + bytes([4 * 4 + 2]))
write("store_protocol", "erase-prefix",
      daemon_set("/g/a", b"1") + daemon_set("/g/b", b"2") + bytes([6 * 4]) + b"\x02/g")

# --- http_reader: one split byte, then what the engine sends -----------------------------------


def answer(status, body, ctype="application/json", extra=""):
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}[status]
    return (f"HTTP/1.1 {status} {reason}\r\ndate: Mon, 23 Nov 2026 21:00:00 GMT\r\n"
            f"server: uvicorn\r\ncontent-length: {len(body)}\r\ncontent-type: {ctype}\r\n{extra}\r\n"
            f"{body}")


ok = json.dumps({"success": True, "message": "Succeeded to update parameter online from distributed."})
refused = json.dumps({"success": False, "message": "Failed to update parameter: x"})
info = json.dumps({"version": "0.5.6", "tp_size": 2, "dp_size": 1, "pp_size": 1,
                   "weight_version": "v3"})
write("http_reader", "pipelined-ok", "\x07" + answer(200, ok) + answer(200, ok))
write("http_reader", "refused-then-500", "\x03" + answer(400, refused) +
      answer(500, "Internal Server Error", "text/plain"))
write("http_reader", "server-info", "\x00" + answer(200, info))
write("http_reader", "connection-close", "\x05" + answer(200, ok, extra="connection: close\r\n"))
chunked = ("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: application/json\r\n\r\n"
           f"{len(ok) // 2:x}\r\n{ok[:len(ok) // 2]}\r\n{len(ok) - len(ok) // 2:x};ext=1\r\n"
           f"{ok[len(ok) // 2:]}\r\n0\r\nx-trailer: 1\r\n\r\n")
write("http_reader", "chunked", "\x02" + chunked)
write("http_reader", "not-found", "\x01" + answer(404, json.dumps({"detail": "Not Found"})))

# --- config: wsyncd config files and group records -----------------------------------------------

with open(os.path.join(HERE, "..", "..", "deploy", "wsyncd.example.json")) as f:
    write("config", "example", f.read())
write("config", "host-mode", json.dumps({
    "socket": "/tmp/w.sock", "mode": "host", "slots": 2, "slot_bytes": "1MiB",
    "bucket_timeout_s": 5.5, "checksum": "none", "listen": "127.0.0.1:7777",
    "insecure_listen": True, "engine_networks": ["127.0.0.1", "10.0.0.0/8", "fd00::/8"],
    "groups": [{"name": "policy", "engines": [{"url": "http://127.0.0.1:30000", "ranks": 2},
                                               {"url": "http://[::1]:30001"}],
                "load_format": "per_tensor"}]}))
write("config", "record", json.dumps({
    "format": 1, "engine_group": "wsync_policy_3", "last_version": "v7",
    "group": {"name": "policy", "kind": "sglang", "transport": "broadcast", "device": 0,
              "engines": [{"url": "http://127.0.0.1:30000", "ranks": 1}],
              "sglang": {"load_format": "flattened_bucket"}},
    "open_update": {"id": "u8", "version": "v8"},
    "needs_full_version": {"http://127.0.0.1:30000": "wsyncd stopped during update u8"}}))
write("config", "sizes", json.dumps({"slot_bytes": 4096, "slots": 4, "lease_s": 1e3}))

# --- manifest: FuzzedDataProvider bytes; a few fixed random ones, the rest found by fuzzing -------

rng = __import__("random").Random(11)
for i in range(4):
    write("manifest", f"random-{i}", bytes(rng.randrange(256) for _ in range(64 + 64 * i)))

# --- torch_pickle: FuzzedDataProvider bytes; one fixed random seed per payload --------------------
# The payload is the first value read, and FuzzedDataProvider reads integers from the end: the
# last byte picks it (0..12, in the order of torch_pickle_fuzzer.cc's Payload enum).

PAYLOADS = ["reduced", "pair", "args", "metadata", "sglang-null", "sglang-flattened",
            "vllm-func-args", "vllm-args", "vllm-packed", "lmdeploy-null", "lmdeploy-flattened",
            "checkpoint-buffer", "checkpoint-bucket"]
rng = __import__("random").Random(12)
for i, payload in enumerate(PAYLOADS):
    write("torch_pickle", payload, bytes(rng.randrange(256) for _ in range(512)) + bytes([i]))

# --- relay_subscribe: a serialized wsync.v1.RelayUp (protobuf wire format, written by hand) -----


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def pb_int(field, v):
    return varint(field << 3) + varint(v)


def pb_bytes(field, data):
    data = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(data)) + data


def subscribe(protocol=1, platform="host", nccl="", node="rollout-1", groups=("policy",),
              slot_bytes=1 << 20, one_dtype=False, close_after=0):
    body = pb_int(1, protocol) + pb_bytes(2, platform) + pb_bytes(4, node)
    if nccl:
        body += pb_bytes(3, nccl)
    for g in groups:
        body += pb_bytes(5, g)
    body += pb_int(6, slot_bytes)
    rules = (pb_int(1, 1) if one_dtype else b"") + (pb_int(2, close_after) if close_after else b"")
    if rules:
        body += pb_bytes(7, rules)
    return pb_bytes(1, body)


write("relay_subscribe", "admitted", subscribe())
write("relay_subscribe", "two-groups-rules", subscribe(groups=("policy", "ref"), one_dtype=True,
                                                        close_after=64 << 20))
write("relay_subscribe", "other-group", subscribe(groups=("critic",)))
write("relay_subscribe", "nccl", subscribe(platform="cuda", nccl="2.28.9"))
write("relay_subscribe", "small-slots", subscribe(slot_bytes=4096))
write("relay_subscribe", "protocol-2", subscribe(protocol=2))
write("relay_subscribe", "duplicate", subscribe(groups=("ref", "ref")))

# --- relay_bucket: a serialized wsync.v1.RelayDown carrying a bucket request (by hand) ----------


def tensor(name, dtype, shape, offset, length):
    body = pb_bytes(1, name) + pb_bytes(2, dtype)
    for d in shape:
        body += pb_int(3, d)
    return body + pb_int(4, offset) + pb_int(5, length)


def relay_bucket(tensors, index=0, last=False, checksum=0x1234):
    bucket = pb_int(1, index) + (pb_int(2, 1) if last else b"")
    for t in tensors:
        bucket += pb_bytes(3, tensor(*t))
    bucket += pb_int(4, checksum)
    request = pb_int(1, 7) + pb_bytes(4, bucket)
    return pb_bytes(2, request)


write("relay_bucket", "two-tensors", relay_bucket([("a", "float32", (4, 4), 0, 64),
                                                   ("b", "bfloat16", (8,), 64, 16)]))
write("relay_bucket", "last", relay_bucket([("w", "int64", (2,), 0, 16)], index=9, last=True))
write("relay_bucket", "past-the-slot", relay_bucket([("w", "uint8", (16,), (1 << 20) - 8, 16)]))
write("relay_bucket", "overlap", relay_bucket([("a", "uint8", (16,), 0, 16),
                                               ("b", "uint8", (16,), 8, 16)]))
write("relay_bucket", "bad-dtype", relay_bucket([("a", "float7", (4,), 0, 4)]))
write("relay_bucket", "wrapping", relay_bucket([("a", "uint8", (16,), (1 << 64) - 8, 16)]))


# --- delta_decode: a bucket delta frame (common/delta/bucket_delta.h) for the fuzzer's bucket of
# a: bf16 x 300, b: float32 x 50, c: int8 x 7; positions are LEB128 varints, as protobuf's ------


def delta_tensor(form, changed, payload):
    return bytes([form]) + u64(changed) + u64(len(payload)) + payload


def delta(*tensors):
    return b"WSD1" + struct.pack("<I", len(tensors)) + b"".join(tensors)


write("delta_decode", "unchanged", delta(delta_tensor(2, 0, b""), delta_tensor(2, 0, b""),
                                         delta_tensor(2, 0, b"")))
write("delta_decode", "each-form", delta(
    delta_tensor(2, 3, varint(0) + varint(4) + varint(293) + b"\x01\x3f\x02\x3f\x03\x3f"),
    delta_tensor(1, 2, bytes([2, 0, 0, 0, 0, 0, 2]) + struct.pack("<ff", 1.5, -2.0)),
    delta_tensor(0, 7, bytes(range(7)))))
write("delta_decode", "position-past-the-end", delta(
    delta_tensor(2, 1, varint(300) + b"\x00\x00"), delta_tensor(2, 0, b""),
    delta_tensor(2, 0, b"")))
