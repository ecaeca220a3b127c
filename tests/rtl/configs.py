"""The configurations every RTL comparison runs on: the default, a small one and a non-square array."""
from __future__ import annotations

import pytest

from aipu.sim.machine.arch import DEFAULT, hardware_config_from_dict

SMALL = hardware_config_from_dict({"mac": {"rows": 4, "cols": 4}, "buffers": {
    name: {"bytes": 1024, "port_bytes": 4} for name in ("act", "weight", "acc", "out", "lut", "param")},
    "dram": {"bytes_per_cycle": 4, "latency_cycles": 7}})
NON_SQUARE = hardware_config_from_dict({"mac": {"rows": 8, "cols": 16}})
WIDE_DRAM = hardware_config_from_dict({"dram": {"address_bits": 44}})   # DRAM addresses beyond 32 bits (host registers)
CONFIGS = {"default": DEFAULT, "small": SMALL, "mac8x16": NON_SQUARE}
EVERY_CONFIG = pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
# The same, with DEFAULT in the slow suite: for tests whose DEFAULT case takes minutes under Amaranth's simulator
# (the CONV unit, DWCONV's parts included) while another default-suite test already covers DEFAULT.
EVERY_CONFIG_DEFAULT_SLOW = pytest.mark.parametrize(
    "config", [pytest.param(config, marks=pytest.mark.slow) if name == "default" else config
               for name, config in CONFIGS.items()], ids=list(CONFIGS))


def wdec_cascade(config, bins_per_cycle: int, engines: int = 1):
    """``config`` with WDEC's ``engines`` part decoders decoding ``bins_per_cycle`` bins of a leaf a cycle each,
    its DRAM word widened where the engine needs more bits a cycle than it has (SMALL's 4 bytes hold one
    stage's 26 bits)."""
    from aipu.sim.timing.wdec_stream import NEED_BITS

    nbytes = max(config.dram.bytes_per_cycle, 1 << (-(-bins_per_cycle * NEED_BITS // 8) - 1).bit_length())
    return hardware_config_from_dict({**config.to_dict(), "wdec": {"bins_per_cycle": bins_per_cycle, "engines": engines},
                                      "dram": {**config.to_dict()["dram"], "bytes_per_cycle": nbytes}})

