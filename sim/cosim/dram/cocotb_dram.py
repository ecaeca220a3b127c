"""The timing core (:class:`~aipu.sim.cosim.dram.model.DramModel`) as an AXI4 slave under cocotb."""
from __future__ import annotations

import cocotb
from cocotb.triggers import RisingEdge

from aipu.sim.cosim.dram.model import INPUTS, OUTPUTS, DramModel, DramParams


class CocotbDram(DramModel):
    """Drives the slave side of ``bus`` (cocotbext-axi's ``AxiBus``, e.g. ``AxiBus.from_prefix(dut, "m_axi")``;
    only its signal handles are used) on every rising edge of ``clock``. While ``reset`` is at
    ``reset_active_level`` the model stays reset; edge 0 is the first edge sampled out of reset. Its data width
    must be ``params.data_bytes``. A protocol error raises out of the coroutine and fails the cocotb test."""

    def __init__(self, bus, clock, params: DramParams, reset=None, reset_active_level: bool = True):
        super().__init__(params)
        handles = {}
        for channel in (bus.read.ar, bus.read.r, bus.write.aw, bus.write.w, bus.write.b):
            handles.update({name: getattr(channel, name) for name in INPUTS + OUTPUTS if hasattr(channel, name)})
        if len(handles["rdata"]) != 8 * params.data_bytes:
            raise ValueError(f"rdata is {len(handles['rdata'])} bits, params.data_bytes {params.data_bytes}")
        self._in = {name: handles[name] for name in INPUTS if name in handles}
        self._out = {name: handles[name] for name in OUTPUTS if name in handles}
        self.clock, self.reset_signal, self.reset_level = clock, reset, int(reset_active_level)
        self.task = cocotb.start_soon(self._run())

    def _sample(self, name: str) -> int:
        handle = self._in.get(name)
        return self.defaults[name] if handle is None else int(handle.value)

    def _drive(self, values: dict[str, int]) -> None:
        for name, value in values.items():
            handle = self._out.get(name)
            if handle is not None:
                handle.value = value

    async def _run(self) -> None:
        edge, in_reset = RisingEdge(self.clock), True
        self._drive(self.reset())
        while True:
            await edge
            if self.reset_signal is not None and int(self.reset_signal.value) == self.reset_level:
                if not in_reset:
                    self._drive(self.reset())
                    in_reset = True
                continue
            in_reset = False
            self._drive(self.step(self._sample))
