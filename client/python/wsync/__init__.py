"""Python client of wsyncd over the C ABI of libwsync_client.so.

    import wsync
    client = wsync.Client("unix:/run/wsync/wsyncd.sock", device=0)
    result = client.push(model.state_dict(), version="step-100", group="policy")

Tensors may be numpy arrays, or torch CPU or CUDA tensors (bfloat16 included; DTensors are
gathered with full_tensor()); a (name, array, dtype) triple reinterprets an array's bytes as
another torch dtype (e.g. numpy uint16 as "bfloat16").

push() streams: it takes tensors from the iterable one at a time and lets go of each as soon as
its bucket has been copied into one of the daemon's slots (or read by wsyncd), so a generator that
gathers one DTensor at a time never holds more than about one slot of gathered weights. Each
group's transport says whether wsyncd reads the trainer's CUDA tensors itself (pull mode, the
default where it measured faster: both built-in transports) or the trainer copies them into slots,
on torch's current stream of the session's device, after the work that produced them, without
synchronising the device.
"""

import collections
import ctypes
import ctypes.util
import json
import os
import pathlib
import sys
import threading

__all__ = ["Client", "WsyncError", "load_library"]

_CODES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}

_NUMPY_DTYPES = {
    "bool": "bool", "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32",
    "int64": "int64", "float16": "float16", "float32": "float32", "float64": "float64",
}


class WsyncError(RuntimeError):
    """An error from wsyncd or the client library, with its google.rpc code."""

    def __init__(self, code, message):
        self.code = code
        self.code_name = _CODES.get(code, str(code))
        self.message = message
        super().__init__(f"{self.code_name}: {message}")


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
    ]


class _PushOptions(ctypes.Structure):
    """wsync_push_options."""
    _fields_ = [
        ("cuda_stream", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("pull_bucket_bytes", ctypes.c_uint64),
        ("tp_rank", ctypes.c_int32),
    ]


_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64, ctypes.c_uint64, ctypes.c_double)


def _candidates():
    env = os.environ.get("WSYNC_CLIENT_LIB")
    if env:
        yield env
    here = pathlib.Path(__file__).resolve().parent
    yield str(here / "libwsync_client.so")
    for up in here.parents:
        yield str(up / "build" / "client" / "libwsync_client.so")
    found = ctypes.util.find_library("wsync_client")
    if found:
        yield found


def progress_bar(p, width=24):
    """One line of a push's progress (the dict push() reports), for a terminal. It fills by
    buckets of the plan once the plan is final (buckets_total > 0); before, by bytes of the
    model where the caller's tensors were all known up front (bytes_expected: a state_dict, a
    list), else not at all, since the bytes added so far are no total."""
    total, expected = p["buckets_total"], p.get("bytes_expected", 0)
    if total:
        fraction, bytes_total = min(1.0, p["buckets_done"] / total), p["bytes_total"]
    elif expected:
        fraction, bytes_total = min(1.0, p["bytes_done"] / expected), expected
    else:
        fraction, bytes_total = 0.0, 0
    filled = int(fraction * width + 0.5)
    return (f"[{'#' * filled}{'.' * (width - filled)}] bucket {p['buckets_done']}/"
            f"{total or '?'}  {p['bytes_done'] / 2**30:.2f}/"
            f"{f'{bytes_total / 2**30:.2f}' if bytes_total else '?'} GiB  "
            f"{p['gib_per_second']:.2f} GiB/s")


def _expected_bytes(named_tensors):
    """The bytes of a state_dict's, list's or tuple's tensors (0 for a stream, or a tensor whose
    size cannot be read)."""
    if hasattr(named_tensors, "items"):
        values = list(named_tensors.values())
    elif isinstance(named_tensors, (list, tuple)):
        values = [item[1] for item in named_tensors if isinstance(item, (list, tuple))
                  and len(item) >= 2]
    else:
        return 0
    try:
        return sum(int(v.nbytes) for v in values)
    except (AttributeError, TypeError):
        return 0


def terminal_bar(stream):
    """A push() progress callback that redraws one bar line on `stream` (a terminal)."""
    def draw(p):
        stream.write("\r" + progress_bar(p))
        if p["buckets_total"] and p["buckets_done"] == p["buckets_total"]:
            stream.write("\n")
        stream.flush()
    return draw


def load_library():
    errors = []
    for path in _candidates():
        if path and (os.path.exists(path) or not os.path.isabs(path)):
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                errors.append(f"{path}: {e}")
                continue
            _declare(lib)
            return lib
    raise OSError("libwsync_client.so not found; build wsync or set WSYNC_CLIENT_LIB "
                  f"({'; '.join(errors) or 'no candidate exists'})")


def _declare(lib):
    err = [ctypes.c_char_p, ctypes.c_size_t]
    lib.wsync_version.restype = ctypes.c_char_p
    lib.wsync_connect.argtypes = [ctypes.c_char_p, ctypes.c_double,
                                  ctypes.POINTER(ctypes.c_void_p)] + err
    lib.wsync_close.argtypes = [ctypes.c_void_p]
    lib.wsync_open_session.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p] + err
    lib.wsync_close_session.argtypes = [ctypes.c_void_p] + err
    lib.wsync_release_sources.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)] + err
    lib.wsync_declare_group.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.c_int)] + err
    lib.wsync_forget_group.argtypes = [ctypes.c_void_p, ctypes.c_char_p] + err
    lib.wsync_slot_bytes.argtypes = [ctypes.c_void_p]
    lib.wsync_slot_bytes.restype = ctypes.c_uint64
    lib.wsync_push.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                               ctypes.POINTER(_Tensor), ctypes.c_size_t, _PROGRESS,
                               ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)] + err
    lib.wsync_push_begin.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                     ctypes.c_void_p, _PROGRESS, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_void_p)] + err
    lib.wsync_push_begin_flags.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_void_p, ctypes.c_uint32, _PROGRESS,
                                           ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)] + err
    lib.wsync_push_begin_options.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                             ctypes.POINTER(_PushOptions), _PROGRESS,
                                             ctypes.c_void_p,
                                             ctypes.POINTER(ctypes.c_void_p)] + err
    lib.wsync_push_add.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Tensor), ctypes.c_size_t,
                                   ctypes.POINTER(ctypes.c_uint64)] + err
    lib.wsync_push_add_flags.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Tensor),
                                         ctypes.POINTER(ctypes.c_uint32), ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.c_uint64)] + err
    lib.wsync_push_commit.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)] + err
    lib.wsync_push_abort.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.wsync_free_string.argtypes = [ctypes.c_void_p]


_PUSH_PULL = 1  # WSYNC_PUSH_PULL
_PUSH_GROUP_DEFAULT = 2  # WSYNC_PUSH_GROUP_DEFAULT
_TENSOR_TEMPORARY = 1  # WSYNC_TENSOR_TEMPORARY


def _weak(value):
    """A weak reference to a tensor object, or None where it takes none."""
    import weakref
    try:
        return weakref.ref(value)
    except TypeError:
        return None


def _view(name, value, dtype=None):
    """Returns (keepalive, pointer, nbytes, shape, torch dtype name, is_cuda, flags) for a tensor.

    flags has _TENSOR_TEMPORARY when the bytes are a copy made here (a gathered DTensor, a
    contiguous copy): pull mode must not map memory freed right after the push.
    """
    mod = type(value).__module__
    if mod.startswith("torch"):
        made = hasattr(value, "full_tensor")
        if made:
            value = value.full_tensor()
        t = value.detach().contiguous()
        made = made or t.data_ptr() != value.data_ptr()
        return (t, t.data_ptr(), t.numel() * t.element_size(), tuple(t.shape),
                dtype or str(t.dtype).replace("torch.", ""), t.device.type == "cuda",
                _TENSOR_TEMPORARY if made else 0)
    import numpy as np
    a = np.ascontiguousarray(value)
    if dtype is None:
        dtype = _NUMPY_DTYPES.get(a.dtype.name)
        if dtype is None:
            raise WsyncError(3, f"tensor '{name}': numpy dtype {a.dtype} has no torch equivalent; "
                                "pass (name, array, dtype) to reinterpret its bytes")
    return a, a.ctypes.data, a.nbytes, a.shape, dtype, False, 0


class Client:
    """A trainer's connection to its node's wsyncd, holding one session (one device's slots)."""

    def __init__(self, target="unix:/run/wsync/wsyncd.sock", device=0, name=None, timeout=5.0):
        self._lib = load_library()
        self._handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(4096)
        rc = self._lib.wsync_connect(target.encode(), timeout, ctypes.byref(self._handle), err,
                                     len(err))
        if rc:
            raise WsyncError(rc, err.value.decode())
        self._device = device
        # Storages of CUDA tensors wsyncd may map (pull mode), by their address, held until
        # release_sources(); weak references to the caller's tensors of them, each with its
        # storage's address; whether a push is running. See _hold_sources.
        self._held_sources = {}
        self._watched = {}
        self._pushing = False
        # Guards the three above and every release: a release runs its RPC holding it, so no
        # push starts (nor holds what it mapped) while wsyncd closes the session's mappings.
        self._hold_lock = threading.RLock()
        self._release_failed = False  # no release from a callback until the next push
        name = name or f"python pid {os.getpid()}"
        rc = self._lib.wsync_open_session(self._handle, device, name.encode(), err, len(err))
        if rc:
            self._lib.wsync_close(self._handle)
            self._handle = None
            raise WsyncError(rc, err.value.decode())

    def declare_group(self, group):
        """Declares a group of this session's own, for engines the trainer started: `group` is a
        dict with the keys of a "groups" entry of wsyncd's config file, e.g. {"name": "policy",
        "kind": "sglang", "engines": [{"url": "http://127.0.0.1:30000", "ranks": 2}],
        "sglang": {"load_format": "flattened_bucket"}}. Declaring it again as it is does
        nothing; with other engines or options (an engine added or removed) it forms anew,
        between updates. The group ends with the session (close(), or the process going away).
        Returns True when it formed now."""
        if not isinstance(group, dict):
            raise WsyncError(3, f"group must be a dict of a config file's group keys, not "
                                f"{type(group).__name__}")
        err = ctypes.create_string_buffer(8192)
        formed = ctypes.c_int(0)
        rc = self._lib.wsync_declare_group(self._handle, json.dumps(group).encode(),
                                           ctypes.byref(formed), err, len(err))
        if rc:
            raise WsyncError(rc, err.value.decode())
        return bool(formed.value)

    def forget_group(self, name):
        """Ends a group this session declared."""
        err = ctypes.create_string_buffer(4096)
        rc = self._lib.wsync_forget_group(self._handle, name.encode(), err, len(err))
        if rc:
            raise WsyncError(rc, err.value.decode())

    @property
    def slot_bytes(self):
        return self._lib.wsync_slot_bytes(self._handle)

    def push(self, named_tensors, version, group, progress=None, pull=None, bucket_bytes=None,
             tp_rank=None):
        """Pushes (name, tensor) pairs, a state_dict or any iterable of pairs as one update.

        Returns the result dict (update_id, buckets, bytes, seconds, gib_per_second, engines,
        daemon_timing: the daemon's per-bucket parts summed, the first bucket's launch after Begin
        and the engines' commit, in wsync.v1.Timing's words (verify_seconds, idle_seconds,
        wire_seconds, answer_seconds, request_late_seconds, first_launch_seconds, finish_seconds;
        idle_before_seconds and broadcast_seconds are deprecated names of idle_seconds and
        wire_seconds, still set), and bucket_rules: what the group's engines demand of a bucket,
        e.g. "one dtype per bucket, close after 64 MiB" or "none"); for a relay group sending
        deltas, also wire_volume: sent_bytes to the downstream daemons against their dense_bytes,
        and the changed_fraction of the elements compared with the last version).
        Buckets are planned by the C++ client under those rules, which wsyncd announces when the
        update starts, so a model of mixed dtypes simply travels in more buckets.
        progress, if given, is called per bucket with a dict of buckets/bytes done and GiB/s;
        left None, a bar is drawn on stderr when it is a terminal; False draws nothing.
        pull=True has wsyncd copy the tensors out of this process's GPU memory itself (no GPU
        work here; see docs/PULL_MODE.md); the result's buckets_pulled says how many it did, and
        buckets_read_in_place how many of those went out with no copy at all. pull=False has this
        process copy them into wsyncd's slots. pull=None (the default) does, for a state_dict, a
        list or a tuple, what the group's transport is fed fastest by, which wsyncd says when the
        update starts (pull mode on both built-in transports); a generator's tensors are copied
        here, since they may be made for the push and dropped as it goes.
        wsyncd keeps pulled memory mapped for the session, and CUDA forbids freeing memory another
        process maps, so the client holds each pulled tensor's storage (not a copy) until
        release_sources(): the model's parameters cost nothing more. A storage nobody else holds
        any more (a temporary the caller made for the push and dropped) is let go as soon as the
        caller drops it, after wsyncd's mappings are closed.
        Copies made here (gathered DTensors, contiguous copies) are never pulled.
        bucket_bytes (pull mode only) plans buckets up to that size instead of a slot's: a bucket
        larger than a slot is read in place from one allocation laid out as it is sent (a flat
        parameter buffer), so a colocated engine gets fewer, larger requests; one that does not
        lie so is refused.
        tp_rank: for a colocated group whose engines' TP ranks span GPUs, this trainer rank's
        place among the group's GPUs (each rank pushes the same version from its own GPU's
        session); wsyncd checks it against the session's GPU.
        """
        # str(None) would push a version named "None".
        if isinstance(version, bool) or not isinstance(version, (str, int)) or version == "":
            raise WsyncError(3, f"version must be a non-empty string (or an int), not "
                                f"{version!r}: it names the weights the engines report")
        items = named_tensors.items() if hasattr(named_tensors, "items") else named_tensors
        # A state_dict, list or tuple is the caller's to hold for the whole push, so pulled
        # memory stays allocated; a generator's tensors may be made for the push and dropped as
        # it goes, which pull mode would hold or (worse) map after they are freed: left to
        # push(), a generator is copied here.
        if pull is None and not (hasattr(named_tensors, "items")
                                 or isinstance(named_tensors, (list, tuple))):
            pull = False

        report = progress
        if progress is None and sys.stderr.isatty():
            report = terminal_bar(sys.stderr)
        # A state_dict's or a list's bytes are known before the first bucket: the bar fills by
        # them until the plan is final.
        expected = _expected_bytes(named_tensors) if report else 0

        def on_progress(_user, done, total, bytes_done, bytes_total, seconds):
            if report:
                report({"buckets_done": done, "buckets_total": total, "bytes_done": bytes_done,
                        "bytes_total": bytes_total, "bytes_expected": expected,
                        "seconds": seconds,
                        "gib_per_second": bytes_done / seconds / 2**30 if seconds > 0 else 0.0})

        callback = _PROGRESS(on_progress)
        err = ctypes.create_string_buffer(8192)
        stream = ctypes.c_void_p()
        held = collections.deque()  # (index, keepalive...) of tensors not yet in a slot
        storages = {}  # CUDA storages wsyncd may map, by address (pull mode)
        callers = []  # (weak reference to the caller's tensor object, its storage's address)
        batch, batch_bytes, added = [], 0, 0
        flush_at = max(self.slot_bytes // 2, 1)

        def flush():
            nonlocal batch, batch_bytes
            if not batch:
                return
            if not stream:
                cuda_stream = self._cuda_stream() if any(b[1] for b in batch) else None
                mode = _PUSH_GROUP_DEFAULT if pull is None else _PUSH_PULL if pull else 0
                options = _PushOptions(cuda_stream, mode, bucket_bytes or 0,
                                       -1 if tp_rank is None else tp_rank)
                rc = self._lib.wsync_push_begin_options(
                    self._handle, group.encode(), str(version).encode(), ctypes.byref(options),
                    callback, None, ctypes.byref(stream), err, len(err))
                if rc:
                    raise WsyncError(rc, err.value.decode())
            structs = [b[0] for b in batch]
            array = (_Tensor * len(structs))(*structs)
            flags = (ctypes.c_uint32 * len(batch))(*[b[2] for b in batch])
            released = ctypes.c_uint64()
            rc = self._lib.wsync_push_add_flags(stream, array, flags, len(structs),
                                                ctypes.byref(released), err, len(err))
            batch, batch_bytes = [], 0
            while held and held[0][0] < released.value:
                held.popleft()
            if rc:
                raise WsyncError(rc, err.value.decode())

        with self._hold_lock:
            self._pushing = True
            self._release_failed = False
        committing = False
        try:
            for item in items:
                name, value = item[0], item[1]
                dtype = item[2] if len(item) > 2 else None
                holder, ptr, nbytes, shape, dtype_name, is_cuda, flags = _view(name, value,
                                                                               dtype)
                shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
                name_b, dtype_b = name.encode(), dtype_name.encode()
                held.append((added, holder, shape_arr, name_b, dtype_b))
                if is_cuda and not flags and pull is not False:
                    storage = holder.untyped_storage()
                    storages.setdefault(storage.data_ptr(), storage)
                    callers.append((_weak(value), storage.data_ptr()))
                batch.append((_Tensor(name_b, dtype_b, len(shape), shape_arr, ptr, nbytes),
                              is_cuda, flags))
                added += 1
                batch_bytes += nbytes
                if batch_bytes >= flush_at or len(batch) >= 256:
                    flush()
            flush()
            if not stream:
                raise WsyncError(3, "nothing to push: no tensors")
            out = ctypes.c_void_p()
            # The commit takes the stream, whatever its outcome: it is not aborted after.
            committing = True
            rc = self._lib.wsync_push_commit(stream, ctypes.byref(out), err, len(err))
            if rc:
                raise WsyncError(rc, err.value.decode())
            try:
                result = json.loads(ctypes.string_at(out.value).decode())
            finally:
                self._lib.wsync_free_string(out)
        except BaseException:
            if stream and not committing:
                self._lib.wsync_push_abort(stream, b"the Python caller raised")
            # wsyncd keeps what a failed update mapped: hold it, then have it closed (the
            # update has ended, unless wsyncd has not finished it yet: then it stays held).
            held.clear()
            self._end_push(storages, callers, release=True)
            raise
        held.clear()
        self._end_push(storages, callers if result.get("buckets_pulled") else [],
                       release=False)
        return result

    def _end_push(self, storages, callers, release):
        """The push is over: holds what wsyncd may have mapped (_hold_sources), then lets go
        of what the caller already dropped, or of everything where `release`."""
        with self._hold_lock:
            if callers or release:
                self._hold_sources(storages, callers)
            self._pushing = False
            if release and self._held_sources:
                try:
                    self.release_sources()
                except WsyncError:
                    pass  # an update still ending: the storages stay held
        self._let_go_of_dropped()

    def _hold_sources(self, storages, callers):
        """Holds the storages of a push's tensors that wsyncd may have mapped, so that no
        allocation it maps is ever freed: torch frees a segment (empty_cache(), or its retry after
        an out-of-memory) only when none of its blocks is in use. Parameters are held by the model
        anyway. A storage that nothing else holds any more (a temporary the trainer made for the
        push and has dropped) is let go at once, after wsyncd's mappings are closed, so pushing
        temporaries never keeps their memory: it is checked now and whenever one of the caller's
        tensor objects of the push dies. Their allocations are mapped anew at the next push."""
        import weakref
        self._held_sources.update(storages)
        this = weakref.ref(self)

        def died(ref):
            client = this()
            if client is not None:
                client._tensor_died(ref)

        for ref, key in callers:
            t = ref() if ref is not None else None
            if t is not None:
                # Keyed by the weak reference's id (a tensor compares elementwise, so the
                # reference itself cannot be a key), so a death removes its own entry.
                w = weakref.ref(t, died)
                self._watched[id(w)] = (w, key)

    def _tensor_died(self, ref):
        """A caller's tensor of a held storage died: that storage may now be held by nothing
        else."""
        with self._hold_lock:
            entry = self._watched.pop(id(ref), None)
        if entry is not None:
            # Its callback runs before the dying tensor lets go of its storage.
            self._let_go_of_dropped(entry[1], dying=1)

    def _let_go_of_dropped(self, key=None, dying=0):
        """release_sources() once a held storage is held by nothing else (its one reference is
        the held storage object's own, plus `dying`: the tensor whose death called this still
        holds it): the one at address `key` (a caller's tensor of it died), or any (None: a push
        ended). Never while a push runs (it ends with a check), at
        interpreter exit, or again after a failed release until the next push."""
        if sys.is_finalizing():
            return
        with self._hold_lock:
            if (self._pushing or self._release_failed or not self._held_sources
                    or not self._handle):
                return
            import torch
            use_count = torch._C._storage_Use_Count
            if key is not None:
                storage = self._held_sources.get(key)
                dropped = storage is not None and use_count(storage._cdata) <= 1 + dying
            else:
                dropped = any(use_count(s._cdata) <= 1 for s in self._held_sources.values())
            if not dropped:
                return
            try:
                self.release_sources()
            except WsyncError as e:  # called as the caller drops a tensor: never raise there
                self._release_failed = True
                print(f"wsync: releasing pulled memory failed: {e}", file=sys.stderr)

    def release_sources(self):
        """Pull mode: wsyncd closes its mappings of this process's memory, which otherwise last
        the session, so the trainer may free it (offload, empty_cache). Returns how many
        allocations were mapped. Not while a push is running."""
        with self._hold_lock:
            closed = ctypes.c_uint32()
            err = ctypes.create_string_buffer(4096)
            rc = self._lib.wsync_release_sources(self._handle, ctypes.byref(closed), err,
                                                 len(err))
            if rc:
                raise WsyncError(rc, err.value.decode())
            self._held_sources.clear()
            self._watched = {}
            return closed.value

    def _cuda_stream(self):
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        handle = torch.cuda.current_stream(self._device).cuda_stream
        # 0 is torch's legacy default stream; to CUDA that handle means "no stream", so name it
        # explicitly (cudaStreamLegacy) to keep the copies ordered after torch's work.
        return handle if handle else 0x1

    def close(self):
        if self._handle:
            self._lib.wsync_close(self._handle)
            self._handle = None
        # wsyncd's mappings went with the session.
        self._held_sources = {}
        self._watched = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
