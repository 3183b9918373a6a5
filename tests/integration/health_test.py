"""wsyncd's standard gRPC health service and server reflection, asked by a client that is not ours
(Debian's python3-grpcio, with the protobuf wire format written out here), and `wsyncctl health`
as a probe: per-service status, NOT_SERVING for trainers while draining and SERVING again after,
the services listed by reflection with their descriptors, and exit codes 0/1.

Usage: health_test.py WSYNCD WSYNCCTL LIBWSYNC_CLIENT PYTHON_PACKAGE_DIR SGLANG_SIM
"""

import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_support import HostWsyncdCase, client_test_arguments  # noqa: E402

client_test_arguments()

import grpc  # noqa: E402

SERVING, NOT_SERVING = 1, 2


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def string_field(number, text):
    data = text.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def fields(buf):
    """(field number, value) of a protobuf message: ints for varints, bytes for the rest."""
    i = 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(buf, i)
        elif wire == 2:
            size, i = read_varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, value


def read_varint(buf, i):
    shift = value = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


class HealthTest(HostWsyncdCase):
    def setUp(self):
        super().setUp()
        self.channel = grpc.insecure_channel("unix:" + self.sock)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.check = self.channel.unary_unary("/grpc.health.v1.Health/Check")

    def tearDown(self):
        self.channel.close()
        super().tearDown()

    def status(self, service):
        reply = self.check(string_field(1, service) if service else b"", timeout=5)
        return dict(fields(reply)).get(1, 0)

    def wait_status(self, service, want, timeout=5):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.status(service) == want:
                return
            time.sleep(0.05)
        self.fail(f"{service!r} never became {want}")

    def test_each_service_serves_and_trainers_are_not_served_while_draining(self):
        for service in ("", "wsync.v1.Trainer", "wsync.v1.Admin"):
            self.assertEqual(self.status(service), SERVING, service)
        with self.assertRaises(grpc.RpcError) as unknown:
            self.status("wsync.v1.Nothing")
        self.assertEqual(unknown.exception.code(), grpc.StatusCode.NOT_FOUND)
        probe = self.ctl("health")
        self.assertEqual(probe.returncode, 0, probe.stdout + probe.stderr)
        self.assertIn("wsync.v1.Trainer", probe.stdout)

        self.assertEqual(self.ctl("drain", "--timeout", "5").returncode, 0)
        self.wait_status("wsync.v1.Trainer", NOT_SERVING)
        self.assertEqual(self.status(""), SERVING, "draining is not a reason to restart")
        self.assertEqual(self.status("wsync.v1.Admin"), SERVING)
        probe = self.ctl("health")
        self.assertEqual(probe.returncode, 1, probe.stdout)
        self.assertIn("NOT_SERVING", probe.stdout)
        self.assertEqual(self.ctl("health", "--service", "").returncode, 0)
        self.assertEqual(self.ctl("health", "--service", "wsync.v1.Trainer").returncode, 1)

        self.assertEqual(self.ctl("undrain").returncode, 0)
        self.wait_status("wsync.v1.Trainer", SERVING)
        self.assertEqual(self.ctl("health").returncode, 0)

    def test_reflection_lists_the_api_and_serves_its_descriptors(self):
        call = self.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        # list_services (field 7), then file_containing_symbol (field 4).
        replies = list(call(iter([string_field(7, ""), string_field(4, "wsync.v1.Admin")]),
                            timeout=10))
        self.assertEqual(len(replies), 2)
        listed = dict(fields(replies[0]))[6]  # list_services_response
        names = {dict(fields(service))[1].decode() for number, service in fields(listed)
                 if number == 1}
        self.assertLessEqual({"wsync.v1.Trainer", "wsync.v1.Admin", "grpc.health.v1.Health"},
                             names)
        descriptors = dict(fields(replies[1]))[4]  # file_descriptor_response
        files = [dict(fields(proto))[1].decode() for number, proto in fields(descriptors)
                 if number == 1]
        self.assertIn("wsync/v1/admin.proto", files)

    def test_a_stopped_wsyncd_fails_the_probe(self):
        self.procs["wsyncd"].send_signal(signal.SIGTERM)
        self.procs["wsyncd"].wait(timeout=20)
        probe = self.ctl("--timeout", "2", "health")
        self.assertEqual(probe.returncode, 1, probe.stdout + probe.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
