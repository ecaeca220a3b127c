"""The timing core (:class:`~aipu.sim.cosim.dram.model.DramModel`) as a process of Amaranth's simulator."""
from __future__ import annotations

from aipu.sim.cosim.dram.model import INPUTS, OUTPUTS, DramModel, DramParams


def add_dram(sim, bus, params: DramParams, *, domain: str = "sync") -> DramModel:
    """Serve ``bus`` (an object whose attributes are the AXI4 signals by their specification names, such as a
    master's :class:`~aipu.rtl.axi.AxiSignature` member) from a new model, which is returned for backdoor access
    (``model.memory``). At every tick of ``domain`` the model steps on the values sampled at the edge and the
    outputs it returns are set for the next cycle: the cycles of the cocotb adapter, edge for edge. Signals
    the bus lacks (ids, sizes, bursts, strobes) read as their defaults (``DramModel.defaults``)."""
    model = DramModel(params)
    inputs = [name for name in INPUTS if hasattr(bus, name)]
    outputs = {name: getattr(bus, name) for name in OUTPUTS if hasattr(bus, name)}

    async def process(ctx):
        def drive(values):
            for name, value in values.items():
                if name in outputs:
                    ctx.set(outputs[name], value)
        drive(model.reset())
        async for _, reset, *values in ctx.tick(domain).sample(*(getattr(bus, name) for name in inputs)):
            if reset:
                drive(model.reset())
                continue
            sampled = dict(zip(inputs, values))
            drive(model.step(lambda name: sampled[name] if name in sampled else model.defaults[name]))

    sim.add_process(process)
    return model
