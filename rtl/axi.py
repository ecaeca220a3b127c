"""AXI4-Lite as an Amaranth signature, seen from the master (a slave takes it ``In``).

The five channels are flat members named as the AXI specification names the signals (``awaddr``, ``awvalid``,
..., ``rready``), so a component member ``s_axil`` of this signature becomes the Verilog ports ``s_axil_awaddr``
... when converted with single-underscore port names (:func:`aipu.sim.cosim.verilog.flat_ports`): the names
cocotbext-axi's ``AxiLiteBus.from_prefix(dut, "s_axil")`` and most integrators expect.
"""
from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

PROT_BITS = 3
RESPONSE_BITS = 2


class AxiLiteSignature(wiring.Signature):
    """Write address, write data, write response, read address and read data channels, each with valid/ready."""

    def __init__(self, address_bits: int, data_bits: int):
        self.address_bits, self.data_bits = address_bits, data_bits
        super().__init__({
            "awaddr": Out(address_bits), "awprot": Out(PROT_BITS), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_bits), "wstrb": Out(data_bits // 8), "wvalid": Out(1), "wready": In(1),
            "bresp": In(RESPONSE_BITS), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(address_bits), "arprot": Out(PROT_BITS), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_bits), "rresp": In(RESPONSE_BITS), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AxiLiteSignature) and (self.address_bits, self.data_bits)
                == (other.address_bits, other.data_bits))

    def __hash__(self):
        return hash((self.address_bits, self.data_bits))

    def __repr__(self):
        return f"AxiLiteSignature({self.address_bits}, {self.data_bits})"
