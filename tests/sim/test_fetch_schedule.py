"""The fetcher's schedule model (sim/timing/fetch.py) on every DRAM word width the configuration allows, including
those too wide for Amaranth's simulator (tests/rtl/test_fetch.py checks the RTL against it where it runs): the
header's words first, then every word of every queue exactly once, each unit's in address order, at most one
request a cycle."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.sim.machine.arch import PORT_BYTES_MAX, hardware_config_from_dict
from aipu.sim.machine.isa import Unit
from aipu.sim.timing.fetch import FetchGeometry, request_schedule

WIDTHS = [1 << shift for shift in range(PORT_BYTES_MAX.bit_length())]


@pytest.mark.parametrize("word_bytes", WIDTHS)
def test_every_word_is_requested_once_in_order(word_bytes):
    rng = np.random.default_rng(word_bytes)
    geometry = FetchGeometry.of(hardware_config_from_dict({"dram": {"bytes_per_cycle": word_bytes}}), 3)
    chunk_words = geometry.chunk_bytes // word_bytes
    counts = {unit: int(rng.integers(0, 20)) for unit in Unit}
    first, queues = 1000, {}
    for unit in Unit:                       # queues one after another, each aligned to a chunk
        queues[unit] = (first, counts[unit])
        first += geometry.chunks(counts[unit]) * chunk_words
    ready, latency, unit_ready = rng.random(20000) < 0.6, rng.integers(1, 12, 20000), rng.random((7, 20000)) < 0.3
    taken = request_schedule(geometry, 0, queues, dram_ready=lambda c: bool(ready[c]),
                             latency=lambda i: int(latency[i]), unit_ready=lambda u, c: bool(unit_ready[u, c]),
                             max_cycles=20000)
    cycles, addresses = [c for c, _ in taken], [a for _, a in taken]
    assert cycles == sorted(set(cycles))
    assert addresses[:geometry.header_words] == list(range(geometry.header_words))
    for unit, (start, count) in queues.items():
        end = start + geometry.chunks(count) * chunk_words
        assert [a for a in addresses[geometry.header_words:] if start <= a < end] == list(range(start, end))
    assert len(addresses) == geometry.header_words + sum(geometry.chunks(c) * chunk_words for c in counts.values())
