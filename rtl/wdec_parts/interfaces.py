"""What WDEC's parts share: the signatures between them, the bin kinds and the widths they agree on."""
from __future__ import annotations

from amaranth.lib import enum
from amaranth.lib.wiring import In, Out, Signature

from aipu.codec.reference.elements import NUM_CONTEXTS, element_spec
from aipu.codec.reference.engine import LG_PMPS_MAX, TRACE_STUFFING
from aipu.codec.reference.geometry import CTU_SIZES
from aipu.rtl.commands import command_layout
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import KERNEL_BITS, Opcode
from aipu.sim.timing.wdec_stream import NEED_BITS

LG_BITS = LG_PMPS_MAX.bit_length()
MAX_ZDEPTH = ((1 << KERNEL_BITS) - 1) ** 2      # taps of a kernel: the Morton tree's z extent at most
MORTON_LEVELS = max((MAX_ZDEPTH - 1).bit_length(), (max(CTU_SIZES) - 1).bit_length())   # bits per axis


class BinKind(enum.Enum, shape=2):
    """How the engine decodes a bin: in a context (updated after), bypass or the stuffing bin (neither)."""
    CONTEXT = 0
    BYPASS = 1
    STUFFING = 2


def command_field(config: HardwareConfig, name: str):
    """The shape of a WDEC command field (the parts take the fields they use as ports of that shape)."""
    return command_layout(config, Opcode.WDEC)[name].shape


def stream_span(config: HardwareConfig) -> Signature:
    """From the syntax walk to the fetcher and the bit window: ``begin`` pulses when a command's stream is to
    be read; ``dram_addr`` and ``length`` are the command's, held for the whole command."""
    return Signature({"begin": Out(1), "dram_addr": Out(command_field(config, "dram_addr")),
                      "length": Out(command_field(config, "length"))})


def bit_window(lanes: int) -> Signature:
    """From the bit window to an engine of ``lanes`` stages: the next ``lanes``·NEED_BITS stream bits MSB first
    (zero past the stream's end), how many of them the stream still has (``avail``), whether the window holds
    all a cycle may need (``ready``), and the bits the engine takes this cycle (``consume``)."""
    view = lanes * NEED_BITS
    return Signature({"bits": Out(view), "avail": Out(range(view + 1)), "ready": Out(1),
                      "consume": In(range(view + 1))})

# From the syntax walk to the bit window: ``check`` asks whether the stream ends here (zero padding to the
# next byte, then the stream's last byte); ``ended`` says it does (the padding is consumed), ``malformed``
# that it does not. Both wait for the window to be ready.
STREAM_END = Signature({"check": Out(1), "ended": In(1), "malformed": In(1)})

# One stage of the engine's cascade, from the syntax walk: ``decode`` a bin of ``kind`` in ``context`` (after
# the previous lane's bin, which it may depend on); ``decoded`` says the engine did, with ``bin``.
BIN_LANE = Signature({"decode": Out(1), "kind": Out(BinKind), "context": Out(range(NUM_CONTEXTS)), "decoded": In(1),
                      "bin": In(1)})


# From the syntax walk to the engine, beside a BIN_LANE per engine stage: ``start`` the engine (its first 9
# bits; ``started`` answers), or ask for up to a bin a lane, in decode order (the engine decodes lane j only
# after lane j-1). ``overrun``: the stream ends before the bits a requested bin needs.
BIN_REQUEST = Signature({"start": Out(1), "started": In(1), "overrun": In(1)})

def rotation_shape(lanes: int) -> int:
    """Bits of the context memory's bank rotation, from the syntax walk: a bank's index, at least one bit (one
    lane: unused)."""
    return max(1, (lanes - 1).bit_length())


# From an engine stage to the context memory: the state (mps, lgPmps) of context ``index``, and its ``update``
# with the decoded ``bin`` at the end of the cycle.
CONTEXT_PORT = Signature({"index": Out(range(NUM_CONTEXTS)), "mps": In(1), "lg": In(LG_BITS), "update": Out(1),
                          "bin": Out(1)})


def leaf_level(config: HardwareConfig) -> Signature:
    """From the syntax walk to the cube stager: ``valid`` when a leaf's ``level`` completes this cycle; the
    current leaf's position (``kernel``, ``tap``, ``channel``, whether or not a level completes) and whether
    this cycle's bins are a leaf's (``in_leaf``: not a header, flag or end bin, nor a Morton skip); the
    part's ``taps`` (k_h·k_w)."""
    return Signature({"valid": Out(1), "level": Out(8), "kernel": Out(command_field(config, "out_c").width + 1),
                      "tap": Out(MORTON_LEVELS), "channel": Out(command_field(config, "in_c").width + 1),
                      "in_leaf": Out(1), "taps": Out(range(MAX_ZDEPTH + 1))})


# A bin decoded this cycle (one lane) as the software trace's pair (ctxIdx, bin); ctxIdx -1 bypass, -2 stuffing.
BIN_TRACE = Signature({"valid": Out(1), "context": Out(range(TRACE_STUFFING, NUM_CONTEXTS)), "bin": Out(1)})


def context_index(name: str, rule: str) -> int:
    """ctxIdxStart of ``name``, whose ctxIdxInc the hardware implements as ``rule`` (checked against the table)."""
    spec = element_spec(name)
    assert spec.inc_rule == rule, f"{name}: the hardware implements ctxIdxInc {rule}, the table says {spec.inc_rule}"
    return spec.ctx_start
