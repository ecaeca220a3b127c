"""`--scheduler` peers on loopback that are not Dask schedulers: a silent listener, an HTTP server, a peer
that closes at once, a closed port, random bytes; each one line naming --scheduler within the time given."""
from __future__ import annotations

import socket
import struct
import threading
import time
from contextlib import contextmanager

import pytest
from hypothesis import strategies as st

from aipu.app.scheduler_probe import HANDSHAKE_BYTES_MAX, HANDSHAKE_MARK, probe_scheduler, tcp_endpoint
from aipu.sim.machine.errors import InputError
from tests.sandbox import Sandbox, fuzz, profiles, run_case


@contextmanager
def peer(answer: bytes | None, close: bool = False, pace: float = 0):
    """A loopback listener that sends ``answer`` to each connection (None: nothing; with ``pace``, one byte
    every ``pace`` seconds), then closes it or holds it."""
    server = socket.create_server(("127.0.0.1", 0))
    held, stop = [], threading.Event()

    def serve():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            _send(connection, answer or b"", pace)
            (connection.close() if close else held.append(connection))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()


def _send(connection: socket.socket, answer: bytes, pace: float) -> None:
    """``answer`` at once, or a byte every ``pace`` seconds; a prober that hangs up first ends it."""
    pieces = [answer[i:i + 1] for i in range(len(answer))] if pace else [answer]
    try:
        for piece in pieces:
            connection.sendall(piece)
            time.sleep(pace)
    except OSError:
        pass


@pytest.mark.parametrize("answer, close, message", [
    (None, False, "nothing came back within 0.5 s"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", True, "answered b'HTTP/1.1', not a Dask"),
    (None, True, "the peer closed the connection after 0 bytes"),
    ((40).to_bytes(8, "little") + bytes(40), True, "answered b'\\x00"),
])
def test_a_service_that_is_not_a_scheduler_is_one_error_in_time(answer, close, message):
    with peer(answer, close) as address:
        started = time.monotonic()
        with pytest.raises(InputError, match="--scheduler = 'tcp://127.0.0.1:[0-9]+': the address of a running "
                                             "Dask scheduler") as caught:
            probe_scheduler(address, 0.5)
        assert message in str(caught.value) and time.monotonic() - started < 5


def _probed(case: tuple[str, float]) -> str:
    """Sandbox side: the probe's message, or "accepted"."""
    try:
        probe_scheduler(*case)
    except InputError as error:
        return str(error)
    return "accepted"


_LENGTH_PREFIXED = st.tuples(st.integers(0, 2 ** 64 - 1) | st.integers(1, HANDSHAKE_BYTES_MAX),
                             st.binary(max_size=64), st.booleans()).map(
    lambda parts: struct.pack("<Q", parts[0]) + (HANDSHAKE_MARK if parts[2] else b"") + parts[1])


@pytest.mark.parametrize("profile", profiles(quick=25, long=500))
def test_random_answers_are_refused_within_the_time(profile):
    """Random bytes, or a length and a body that may or may not name the mark, sent at once or a byte at a
    time, then held or closed: the probe (in the sandbox) refuses each within its time, or accepts only a
    handshake that has the mark."""
    box = Sandbox()

    def check(case):
        answer, close, pace = case
        with peer(answer, close, pace) as address:
            started = time.monotonic()
            message = run_case(box, _probed, (address, 0.3))
            assert time.monotonic() - started < 3, message
        if message == "accepted":
            length, = struct.unpack("<Q", answer[:8])
            assert 0 < length <= HANDSHAKE_BYTES_MAX and HANDSHAKE_MARK in answer[8:8 + length]
        else:
            assert message.startswith(f"--scheduler = '{address}'") and "\n" not in message

    try:
        fuzz(profile, st.tuples(st.binary(max_size=64) | _LENGTH_PREFIXED, st.booleans(),
                                st.sampled_from([0, 0, 0.02])), check)
    finally:
        box.close()


def test_a_closed_port_and_bad_addresses_are_named():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    with pytest.raises(InputError, match="Connection refused"):
        probe_scheduler(f"127.0.0.1:{port}", 1)
    for address in ("nonsense", "tcp://host:", "tcp://:80", "tcp://h:99999"):
        with pytest.raises(InputError, match=f"--scheduler = '{address}'"):
            tcp_endpoint(address)
    assert tcp_endpoint("tcp://[::1]:8786") == ("::1", 8786)
    assert tcp_endpoint("inproc://192.0.2.2/1/1") is None


def test_a_dask_scheduler_passes():
    import asyncio

    from distributed import Scheduler

    async def probe_a_scheduler():
        async with Scheduler(port=0, host="127.0.0.1", dashboard_address=":0") as scheduler:
            await asyncio.get_running_loop().run_in_executor(None, probe_scheduler, scheduler.address, 5)

    asyncio.run(probe_a_scheduler())


def test_sweep_at_an_http_server_is_one_line_with_status_2(capsys):
    from aipu.app.cli import main

    with peer(b"HTTP/1.1 400 Bad Request\r\n\r\n", close=True) as address:
        assert main(["sweep", "--no-cache", "--scheduler", address]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and f"--scheduler = '{address}'" in error and "not a Dask handshake" in error
