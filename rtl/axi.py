"""AXI4-Lite and AXI4 as Amaranth signatures, seen from the master (a slave takes them ``In``).

The five channels are flat members named as the AXI specification names the signals (``awaddr``, ``awvalid``,
..., ``rready``), so a component member ``s_axil`` of this signature becomes the Verilog ports ``s_axil_awaddr``
... when converted with single-underscore port names (:func:`aipu.sim.cosim.verilog.flat_ports`): the names
cocotbext-axi's ``AxiLiteBus.from_prefix(dut, "s_axil")`` (``AxiBus`` for AXI4) and most integrators expect.
"""
from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

PROT_BITS = 3
RESPONSE_BITS = 2
LEN_BITS = 8
SIZE_BITS = 3
BURST_BITS = 2


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


class AxiSignature(wiring.Signature):
    """AXI4 with ids, bursts (``len``, ``size``, ``burst``) and ``last``; no lock, cache, prot, qos or user signals,
    which cocotbext-axi's ``AxiBus`` treats as optional."""

    def __init__(self, address_bits: int, data_bits: int, id_bits: int):
        self.address_bits, self.data_bits, self.id_bits = address_bits, data_bits, id_bits
        members = {}
        for prefix in ("aw", "ar"):
            members.update({f"{prefix}id": Out(id_bits), f"{prefix}addr": Out(address_bits),
                            f"{prefix}len": Out(LEN_BITS), f"{prefix}size": Out(SIZE_BITS),
                            f"{prefix}burst": Out(BURST_BITS), f"{prefix}valid": Out(1), f"{prefix}ready": In(1)})
            if prefix == "aw":
                members.update({"wdata": Out(data_bits), "wstrb": Out(data_bits // 8), "wlast": Out(1),
                                "wvalid": Out(1), "wready": In(1),
                                "bid": In(id_bits), "bresp": In(RESPONSE_BITS), "bvalid": In(1), "bready": Out(1)})
        members.update({"rid": In(id_bits), "rdata": In(data_bits), "rresp": In(RESPONSE_BITS), "rlast": In(1),
                        "rvalid": In(1), "rready": Out(1)})
        super().__init__(members)

    def __eq__(self, other):
        return (isinstance(other, AxiSignature) and (self.address_bits, self.data_bits, self.id_bits)
                == (other.address_bits, other.data_bits, other.id_bits))

    def __hash__(self):
        return hash((self.address_bits, self.data_bits, self.id_bits))

    def __repr__(self):
        return f"AxiSignature({self.address_bits}, {self.data_bits}, {self.id_bits})"
