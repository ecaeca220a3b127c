"""Amaranth HDL of the AIPU: one module per fixed-function unit, the System that puts them behind command
queues, scratchpads and a DRAM model, and each command's cycle formula (``timing``); all elaborated from
sim/machine (docs/rtl.md)."""
