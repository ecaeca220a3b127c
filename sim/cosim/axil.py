"""One AXI4-Lite transaction at a time from Amaranth's simulator, for a testbench that drives a ``s_axil`` slave
(the NPU's host registers): ``write`` and ``read`` each hold their valids until taken and return the response."""
from __future__ import annotations


async def write(ctx, dut, address: int, data: int, strobe: int = 0b1111) -> int:
    """One write; returns BRESP."""
    bus = dut.s_axil
    ctx.set(bus.awaddr, address)
    ctx.set(bus.wdata, data)
    ctx.set(bus.wstrb, strobe)
    for valid in (bus.awvalid, bus.wvalid, bus.bready):
        ctx.set(valid, 1)
    while True:
        taken = [(valid, ctx.get(valid) and ctx.get(ready))
                 for valid, ready in ((bus.awvalid, bus.awready), (bus.wvalid, bus.wready))]
        response = ctx.get(bus.bresp) if ctx.get(bus.bvalid) else None
        await ctx.tick()
        for valid, done in taken:
            if done:
                ctx.set(valid, 0)
        if response is not None:
            ctx.set(bus.bready, 0)
            return response


async def read(ctx, dut, address: int) -> tuple[int, int]:
    """One read; returns (RRESP, RDATA)."""
    bus = dut.s_axil
    ctx.set(bus.araddr, address)
    ctx.set(bus.arvalid, 1)
    ctx.set(bus.rready, 1)
    while True:
        taken = ctx.get(bus.arvalid) and ctx.get(bus.arready)
        response = (ctx.get(bus.rresp), ctx.get(bus.rdata)) if ctx.get(bus.rvalid) else None
        await ctx.tick()
        if taken:
            ctx.set(bus.arvalid, 0)
        if response is not None:
            ctx.set(bus.rready, 0)
            return response
