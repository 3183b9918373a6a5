"""The engine side of checkpoint-engine's ZMQ exchange: one REP socket that connects to the
address wsyncd bound. pyzmq where it is installed (CI installs python3-zmq), else libzmq through
ctypes (the GPU machine has no pyzmq; wsyncd's bundle carries libzmq.so.5)."""

import ctypes
import ctypes.util

try:
    import zmq  # noqa: F401
    HAVE_PYZMQ = True
except ImportError:
    HAVE_PYZMQ = False


class Timeout(Exception):
    """No message within the socket's timeout: the peer is gone or hung."""


class _PyzmqRep:
    def __init__(self, address, timeout_s):
        import zmq
        self._zmq = zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.connect(address)

    def recv(self):
        try:
            return self.sock.recv()
        except self._zmq.Again:
            raise Timeout("no message")

    def send(self, data):
        self.sock.send(data)

    def close(self):
        self.sock.close()
        self.ctx.term()


class _CtypesRep:
    ZMQ_REP = 4
    ZMQ_RCVTIMEO = 27
    ZMQ_LINGER = 17
    EAGAIN = 11

    def __init__(self, address, timeout_s):
        name = ctypes.util.find_library("zmq") or "libzmq.so.5"
        z = self.z = ctypes.CDLL(name, use_errno=True)
        z.zmq_ctx_new.restype = ctypes.c_void_p
        z.zmq_socket.restype = ctypes.c_void_p
        z.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
        z.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        z.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                     ctypes.c_size_t]
        z.zmq_msg_init.argtypes = [ctypes.c_void_p]
        z.zmq_msg_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        z.zmq_msg_data.restype = ctypes.c_void_p
        z.zmq_msg_data.argtypes = [ctypes.c_void_p]
        z.zmq_msg_size.restype = ctypes.c_size_t
        z.zmq_msg_size.argtypes = [ctypes.c_void_p]
        z.zmq_msg_close.argtypes = [ctypes.c_void_p]
        z.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        z.zmq_close.argtypes = [ctypes.c_void_p]
        z.zmq_ctx_term.argtypes = [ctypes.c_void_p]
        self.ctx = z.zmq_ctx_new()
        self.sock = z.zmq_socket(self.ctx, self.ZMQ_REP)
        for opt, value in ((self.ZMQ_RCVTIMEO, int(timeout_s * 1000)), (self.ZMQ_LINGER, 1000)):
            v = ctypes.c_int(value)
            z.zmq_setsockopt(self.sock, opt, ctypes.byref(v), ctypes.sizeof(v))
        if z.zmq_connect(self.sock, address.encode()) != 0:
            raise OSError(ctypes.get_errno(), f"zmq_connect {address}")

    def recv(self):
        msg = ctypes.create_string_buffer(64)  # zmq_msg_t is 64 bytes
        self.z.zmq_msg_init(msg)
        try:
            if self.z.zmq_msg_recv(msg, self.sock, 0) < 0:
                err = ctypes.get_errno()
                if err == self.EAGAIN:
                    raise Timeout("no message")
                raise OSError(err, "zmq_msg_recv")
            return ctypes.string_at(self.z.zmq_msg_data(msg), self.z.zmq_msg_size(msg))
        finally:
            self.z.zmq_msg_close(msg)

    def send(self, data):
        if self.z.zmq_send(self.sock, data, len(data), 0) < 0:
            raise OSError(ctypes.get_errno(), "zmq_send")

    def close(self):
        self.z.zmq_close(self.sock)
        self.z.zmq_ctx_term(self.ctx)


def rep_socket(address, timeout_s=120.0, prefer_ctypes=False):
    """A connected REP socket: recv() -> bytes (Timeout after timeout_s), send(bytes), close()."""
    if HAVE_PYZMQ and not prefer_ctypes:
        return _PyzmqRep(address, timeout_s)
    return _CtypesRep(address, timeout_s)
