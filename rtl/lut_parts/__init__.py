"""The named parts LUT (aipu.rtl.lut) is built from, one Amaranth component per module.

  control    the command's phases: LOAD, then RUN and DRAIN (LUT) or SOFTMAX; the faults in the first cycle
             after the load
  checks     what the other parts read from the command (types, sizes, the table), and every fault check
             of LUT and SOFTMAX in the interpreter's order
  table      the table load: LUT words into the rows of the local table, entries checked on the way in; a
             lane's copy of the table, its even and odd rows in two banks (1R1W each)
  fetch      the source window and the element groups: each lane's element of the group in RUN stage 1
  lookup     one lane: its index and fraction (stage 1), its table entries interpolated and clamped (stage 2)
  softmax    SOFTMAX's three passes over each row and its pipelined divider
  packer     the write-back: a group's bytes (or a softmax result) into whole OUT words

interfaces.py holds the operands the parts share and the local table's geometry.
"""
