"""The testbench DRAM's timing core: an AXI4 slave over ``size`` bytes with exactly stated timing, in plain Python.

Edge ``e`` is the ``e``-th rising clock edge out of reset (edge 0 the first). :meth:`DramModel.step` is called at
every edge with the master's signals as sampled just before it, and returns the slave's outputs for the cycle
that follows (sampled by the master at edge ``e + 1``). Every output is a function of the state after an edge:
no ready depends on a valid of the same cycle. The rules (docs/rtl-cosim.md, "DRAM models"):

* read: AR accepted at edge ``a`` -> its first R beat is presented for edge ``a + read_latency`` at the earliest,
  and after the previous burst's last R handshake: ``firstR_k = max(AR_k + L, lastR_{k-1} + 1)`` with ``rready``
  high; each later beat one edge after the handshake of the one before. ``arready`` = read bursts accepted and
  not ended by their ``rlast`` handshake < ``read_depth``.
* write: ``awready`` = write bursts accepted and not answered by their B handshake < ``write_depth``; ``wready``
  = some accepted AW still lacks W beats (W never runs ahead of its AW); ``B_k = max(AW_k, Wlast_k) +
  write_latency`` at the earliest, after ``B_{k-1}``'s handshake.
* data: a W beat is written at its handshake; an R beat carries the memory as it is after the edge before the
  edge it is presented for, and holds it while ``rready`` is low.
* errors: the first of ``errors`` that a burst's bytes touch answers on every R beat (data 0) or on B (memory
  unchanged); a burst touching bytes at or beyond ``size`` and no range answers DECERR.
* protocol errors (:class:`AxiProtocolError`): FIXED or WRAP bursts, narrow transfers, an INCR burst crossing a
  4 KiB boundary, ``wlast`` off the burst's last beat.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

from aipu.sim.machine.arch import DEFAULT

BOUNDARY = 4096
INCR = 1
BURST_NAMES = {0: "FIXED", 1: "INCR", 2: "WRAP", 3: "reserved"}
INPUTS = ("arvalid", "araddr", "arlen", "arsize", "arburst", "arid", "rready",
          "awvalid", "awaddr", "awlen", "awsize", "awburst", "awid", "wvalid", "wdata", "wstrb", "wlast", "bready")
OUTPUTS = ("arready", "rvalid", "rdata", "rid", "rresp", "rlast", "awready", "wready", "bvalid", "bid", "bresp")


class Resp(IntEnum):
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class AxiProtocolError(Exception):
    """The master broke AXI4 or asked for what this DRAM refuses (see the module's docstring)."""


@dataclass(frozen=True)
class ErrorRange:
    """Bytes ``[start, end)``: a burst touching any of them answers ``resp`` (SLVERR or DECERR)."""

    start: int
    end: int
    resp: Resp = Resp.SLVERR

    def __post_init__(self):
        if not 0 <= self.start < self.end:
            raise ValueError(f"error range [{self.start:#x}, {self.end:#x}) is empty")
        if self.resp not in (Resp.SLVERR, Resp.DECERR):
            raise ValueError(f"error range response {self.resp!r}: expected SLVERR or DECERR")


@dataclass(frozen=True)
class DramParams:
    """What every form of the DRAM is built from. ``read_depth`` defaults to ``read_latency + 1``, the least with
    which single-beat reads issued every cycle never see ``arready`` low; ``write_depth`` to ``write_latency + 2``,
    the same for single-beat writes (W comes one edge after its AW at the earliest)."""

    size: int
    data_bytes: int = DEFAULT.dram.bytes_per_cycle     # a beat: the NPU's DRAM word
    read_latency: int = 2
    write_latency: int = 2
    read_depth: int = 0
    write_depth: int = 0
    errors: tuple[ErrorRange, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.data_bytes & (self.data_bytes - 1) or not 1 <= self.data_bytes <= 128:
            raise ValueError(f"data_bytes {self.data_bytes}: a power of two up to 128")
        if self.size <= 0 or self.size % self.data_bytes:
            raise ValueError(f"size {self.size}: a positive multiple of data_bytes ({self.data_bytes})")
        if self.read_latency < 1 or self.write_latency < 1:
            raise ValueError("read_latency and write_latency: at least 1")
        object.__setattr__(self, "read_depth", self.read_depth or self.read_latency + 1)
        object.__setattr__(self, "write_depth", self.write_depth or self.write_latency + 2)
        object.__setattr__(self, "errors", tuple(ErrorRange(*e) if not isinstance(e, ErrorRange) else e
                                                 for e in self.errors))

    @property
    def size_code(self) -> int:
        """``arsize``/``awsize`` of a full-width beat."""
        return self.data_bytes.bit_length() - 1

    def response(self, address: int, beats: int) -> Resp:
        """The answer to a burst of ``beats`` full-width beats from ``address`` (rounded down to a beat)."""
        start = address - address % self.data_bytes
        end = start + beats * self.data_bytes
        for error in self.errors:
            if start < error.end and error.start < end:
                return error.resp
        return Resp.DECERR if end > self.size else Resp.OKAY

    def check_burst(self, channel: str, address: int, length: int, size: int, burst: int) -> None:
        """Raise :class:`AxiProtocolError` for a burst this DRAM refuses."""
        where = f"{channel} burst at {address:#x} (len {length})"
        if burst != INCR:
            raise AxiProtocolError(f"{where}: {BURST_NAMES[burst]} bursts are not supported, only INCR")
        if size != self.size_code:
            raise AxiProtocolError(f"{where}: size {size} ({1 << size} bytes) is narrower than the "
                                   f"{self.data_bytes}-byte bus; only full-width beats are supported")
        start = address - address % self.data_bytes
        if start % BOUNDARY + (length + 1) * self.data_bytes > BOUNDARY:
            raise AxiProtocolError(f"{where}: crosses the 4 KiB boundary at "
                                   f"{(start // BOUNDARY + 1) * BOUNDARY:#x} (AXI4 forbids it)")


@dataclass
class _Burst:
    """A burst accepted and not yet finished: ``due`` the earliest edge of its first R beat or of its B."""

    due: int
    word: int
    beats: int
    ident: int
    resp: Resp
    beat: int = 0


class DramModel:
    """The timing core: memory, queues and the outputs of the current cycle (``outputs``)."""

    def __init__(self, params: DramParams):
        self.params = params
        self.memory = bytearray(params.size)
        self.defaults = {"arsize": params.size_code, "awsize": params.size_code, "arburst": INCR,
                         "awburst": INCR, "arid": 0, "awid": 0, "wstrb": (1 << params.data_bytes) - 1}
        self.reset()

    def read(self, address: int, length: int) -> bytes:
        return bytes(self.memory[address:address + length])

    def write(self, address: int, data: bytes) -> None:
        self.memory[address:address + len(data)] = data

    def reset(self) -> dict[str, int]:
        """Empty queues and the outputs held in reset (and in the first cycle out of it)."""
        self.edge = -1
        self.reads: deque[_Burst] = deque()       # accepted, first beats not all presented
        self.writes: deque[_Burst] = deque()      # accepted, W beats not all in
        self.answers: deque[_Burst] = deque()     # all W beats in, B not yet presented
        self.reads_open = self.writes_open = 0    # bursts counted against read_depth, write_depth
        self.outputs = {"arready": 1, "rvalid": 0, "rdata": 0, "rid": 0, "rresp": 0, "rlast": 0,
                        "awready": 1, "wready": 0, "bvalid": 0, "bid": 0, "bresp": 0}
        return dict(self.outputs)

    def step(self, sample) -> dict[str, int]:
        """One rising edge: ``sample(name)`` gives an input's value just before it (asked only when needed).
        Returns the outputs that change for the next cycle."""
        self.edge += 1
        out, params = self.outputs, self.params
        r_free = not out["rvalid"] or sample("rready")
        if out["rvalid"] and r_free and out["rlast"]:
            self.reads_open -= 1
        b_free = not out["bvalid"] or sample("bready")
        if out["bvalid"] and b_free:
            self.writes_open -= 1
        if out["arready"] and sample("arvalid"):
            self.reads.append(self._accept("AR", sample, params.read_latency))
            self.reads_open += 1
        if out["awready"] and sample("awvalid"):
            self.writes.append(self._accept("AW", sample, 0))
            self.writes_open += 1
        if out["wready"] and sample("wvalid"):
            self._write_beat(sample)
        new = {"arready": int(self.reads_open < params.read_depth),
               "awready": int(self.writes_open < params.write_depth), "wready": int(bool(self.writes))}
        if r_free:
            new.update(self._next_read_beat())
        if b_free:
            new.update(self._next_answer())
        changed = {name: value for name, value in new.items() if out[name] != value}
        out.update(changed)
        return changed

    def _accept(self, channel: str, sample, latency: int) -> _Burst:
        prefix = channel[:2].lower()
        address, length = sample(f"{prefix}addr"), sample(f"{prefix}len")
        self.params.check_burst(channel, address, length, sample(f"{prefix}size"), sample(f"{prefix}burst"))
        return _Burst(self.edge + latency, address // self.params.data_bytes, length + 1, sample(f"{prefix}id"),
                      self.params.response(address, length + 1))

    def _write_beat(self, sample) -> None:
        burst, width = self.writes[0], self.params.data_bytes
        last = burst.beat == burst.beats - 1
        if bool(sample("wlast")) != last:
            raise AxiProtocolError(f"W beat {burst.beat} of the burst at {burst.word * width:#x} (len "
                                   f"{burst.beats - 1}): wlast is {int(not last)}, expected {int(last)}")
        if burst.resp == Resp.OKAY:
            data = sample("wdata").to_bytes(width, "little")
            strobe, base = sample("wstrb"), (burst.word + burst.beat) * width
            if strobe == (1 << width) - 1:
                self.memory[base:base + width] = data
            else:
                for lane in range(width):
                    if strobe >> lane & 1:
                        self.memory[base + lane] = data[lane]
        burst.beat += 1
        if last:
            self.writes.popleft()
            burst.due = self.edge + self.params.write_latency
            self.answers.append(burst)

    def _next_read_beat(self) -> dict[str, int]:
        if not self.reads or self.reads[0].due > self.edge + 1:
            return {"rvalid": 0}
        burst, width = self.reads[0], self.params.data_bytes
        base = (burst.word + burst.beat) * width
        data = int.from_bytes(self.memory[base:base + width], "little") if burst.resp == Resp.OKAY else 0
        burst.beat += 1
        if burst.beat == burst.beats:
            self.reads.popleft()
        return {"rvalid": 1, "rdata": data, "rid": burst.ident, "rresp": int(burst.resp),
                "rlast": int(burst.beat == burst.beats)}

    def _next_answer(self) -> dict[str, int]:
        if not self.answers or self.answers[0].due > self.edge + 1:
            return {"bvalid": 0}
        burst = self.answers.popleft()
        return {"bvalid": 1, "bid": burst.ident, "bresp": int(burst.resp)}
