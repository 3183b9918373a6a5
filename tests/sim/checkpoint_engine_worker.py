"""checkpoint-engine's worker side of /update_weights_from_ipc (docs/engines/sglang.md), as
its releases behave, for the host and GPU simulators; the caller supplies how a buffer is mapped
and how a bucket is loaded.

Per TP rank, on a REP socket connected to wsyncd's address, each message one plain pickle:
- the first frame is (FUNC, ARGS) of a uint8 buffer: the rank calls FUNC(*ARGS) with ARGS[6]
  replaced by its own device index, and answers b"";
- a list of {"name", "shape", "dtype", "offset"} is a bucket: each tensor is
  buffer[offset:offset + itemsize * numel] viewed as dtype and shape; the rank loads them,
  synchronizes and answers b"";
- None ends it. Generation "g4" (checkpoint-engine >= 0.4.0) drops the mapping at the first None
  and answers, then post-processes at a second None; "g1" (the 0.1.x releases SGLang pins)
  post-processes at the first None and returns;
- an exception object makes the rank raise without answering.
A failed bucket: "g4" answers its traceback and waits for the next message; "g1" raises without
answering (the engine's HTTP request then fails).
"""

import traceback

GENERATIONS = ("g1", "g4")


class WorkerError(Exception):
    """The rank's update failed: the engine answers its request with this message."""


def _failure_text(err):
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


def extract(payload, buffer_len, view):
    """The (name, tensor) pairs of a bucket frame: `view(offset, nbytes, dtype, shape)` makes one
    tensor; raises like the worker's slicing and view would when a tensor does not fit."""
    out = []
    for item in payload:
        shape = item["shape"]
        if not isinstance(shape, (list, tuple)):
            raise AssertionError(f"shape {shape!r} is not a torch.Size")
        numel = 1
        for d in shape:
            numel *= d
        dtype, offset = item["dtype"], item["offset"]
        nbytes = dtype.itemsize * numel
        if offset + nbytes > buffer_len:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size "
                               f"{max(0, buffer_len - offset) // dtype.itemsize}")
        if offset % dtype.itemsize:
            raise RuntimeError(f"offset {offset} is not aligned to {dtype}")
        out.append((item["name"], view(offset, nbytes, dtype, shape)))
    return out


def serve(sock, unpickle, map_buffer, load, post_hook=None, release=None, generation="g4",
          on_bucket=None, finish=None):
    """Runs one rank's update to its end. map_buffer((func, args)) -> buffer; load(payload,
    buffer); release(buffer) drops the mapping; on_bucket(index) runs before each bucket is
    loaded (fault injection); finish() runs last, however the update ended (every generation's
    `finally`: gc.collect and empty_cache). Raises WorkerError when the update failed."""
    if generation not in GENERATIONS:
        raise ValueError(f"generation must be one of {GENERATIONS}")
    try:
        _serve(sock, unpickle, map_buffer, load, post_hook, release, generation, on_bucket)
    finally:
        if finish is not None:
            finish()


def _serve(sock, unpickle, map_buffer, load, post_hook, release, generation, on_bucket):
    payload = unpickle(sock.recv())
    try:
        if not isinstance(payload, tuple):
            raise AssertionError(f"the first frame must be an IPC handle, not {type(payload)}")
        buffer = map_buffer(payload)
    except Exception as err:  # noqa: BLE001
        if generation == "g1":
            raise WorkerError(f"mapping the buffer failed: {err}") from err
        sock.send(_failure_text(err).encode())
        sock.recv()  # the producer's acknowledgement
        raise WorkerError(f"mapping the buffer failed: {err}") from err
    sock.send(b"")
    released = False
    index = 0
    while True:
        payload = unpickle(sock.recv())
        if released:
            if payload is not None:
                raise WorkerError("a message after the buffer was released")
            if post_hook is not None:
                post_hook()
            sock.send(b"")
            return
        if payload is None:
            if generation == "g4":
                if release is not None:
                    release(buffer)
                buffer = None
                released = True
                sock.send(b"")
                continue
            if post_hook is not None:
                post_hook()
            sock.send(b"")
            return
        if isinstance(payload, BaseException):
            raise WorkerError(f"the producer aborted: {payload}")
        if not isinstance(payload, list):
            raise WorkerError(f"Unexpected payload type: {type(payload)}")
        try:
            if on_bucket is not None:
                on_bucket(index)
            index += 1
            load(payload, buffer)
        except Exception as err:  # noqa: BLE001
            if generation == "g1":
                raise WorkerError(f"loading a bucket failed: {err}") from err
            sock.send(_failure_text(err).encode())
            continue
        sock.send(b"")
