"""Whether the address given as `aipu sweep --scheduler` is a Dask scheduler, asked before a Dask client
connects to it.

distributed's client takes the first 8 bytes a peer sends as the length of its handshake and allocates that
much (an HTTP server's "HTTP/1.1" reads as 3 EiB), and it waits for a handshake that a silent listener never
sends, past its connect timeout. A scheduler sends its handshake as soon as a connection opens: an 8-byte
little-endian length, then that many bytes of msgpack frames naming its "pickle-protocol". The probe reads at
most HANDSHAKE_BYTES_MAX bytes of it within the time given, then closes. Addresses of other schemes than
tcp (Dask's in-process ``inproc://``, for one) are left to distributed.
"""
from __future__ import annotations

import socket
import struct
import time

from aipu.sim.machine.errors import InputError

HANDSHAKE_BYTES_MAX = 1 << 16        # a scheduler's is under a hundred bytes
HANDSHAKE_MARK = b"pickle-protocol"
ALLOWED = "the address of a running Dask scheduler, such as tcp://host:8786"


def probe_scheduler(address: str, seconds: float) -> None:
    """InputError naming ``--scheduler`` unless a Dask scheduler answers at the tcp ``address`` within
    ``seconds``."""
    endpoint = tcp_endpoint(address)
    if endpoint is None:
        return
    deadline = time.monotonic() + seconds
    try:
        with socket.create_connection(endpoint, timeout=seconds) as peer:
            length, = struct.unpack("<Q", _receive(peer, 8, deadline))
            if not 0 < length <= HANDSHAKE_BYTES_MAX:
                raise _not_a_scheduler(address, struct.pack("<Q", length))
            handshake = _receive(peer, length, deadline)
    except TimeoutError:
        raise InputError("--scheduler", address, f"{ALLOWED}: nothing came back within {seconds:g} s") from None
    except OSError as error:
        raise InputError("--scheduler", address, f"{ALLOWED} ({error.strerror or error})") from None
    if HANDSHAKE_MARK not in handshake:
        raise _not_a_scheduler(address, handshake)


def tcp_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``tcp://host:port`` or ``host:port`` address; None for another scheme."""
    scheme, separator, rest = address.partition("://")
    if not separator:
        scheme, rest = "tcp", address
    if scheme != "tcp":
        return None
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdecimal() or not 1 <= int(port) <= 65535:
        raise InputError("--scheduler", address, ALLOWED)
    return host.removeprefix("[").removesuffix("]"), int(port)


def _receive(peer: socket.socket, count: int, deadline: float) -> bytes:
    """Exactly ``count`` bytes from ``peer`` before ``deadline`` (TimeoutError after it; OSError when the peer
    closes first)."""
    data = bytearray()
    while len(data) < count:
        peer.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = peer.recv(count - len(data))
        if not chunk:
            raise OSError(f"the peer closed the connection after {len(data)} bytes, before a Dask handshake")
        data += chunk
    return bytes(data)


def _not_a_scheduler(address: str, first: bytes) -> InputError:
    return InputError("--scheduler", address, f"{ALLOWED}: the service there answered {first[:16]!r}, not a Dask "
                                              "handshake")
