"""The named parts CONV (aipu.rtl.conv) is built from, one Amaranth component per module.

CONV's (weight-stationary; ``sequencer`` and ``mac`` serve DWCONV too):
  sequencer  the command's steps: two setup cycles, then phases (load block 0; stream block b, load b + 1)
  setup      the tile geometry and the faults, in the interpreter's order
  blocks     the block walk: the block being loaded, where its operands are, what it holds
  loader     the next block's weight columns from WEIGHT, as operands for the MAC array's idle bank
  issue      a pixel every ``beats`` cycles: its ACT and ACC words read and gathered into runs
  mac        the two weight banks and one pixel's ``cols`` dot products added to its old accumulators
  writeback  the new accumulators into ACC, byte-masked to the block's output channels
  window     the word window the loader, the issue and the tap walk gather runs at any byte offset with

DWCONV's (output-stationary):
  depthwise_setup  the planes' and blocks' geometry and the faults, in the interpreter's order
  taps             the blocks of positions and their taps: input runs from WEIGHT, kernels from ACT
  slots            a tap's run squeezed into the accumulator slots (ACC order), each slot's weight
  accumulators     two banks of one int32 per multiplier
  drain            a finished bank into ACC, one run of entries, two words a cycle

interfaces.py holds the signatures they connect through and the ranges they agree on.
"""
