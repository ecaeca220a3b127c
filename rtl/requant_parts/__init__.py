"""The named parts REQUANT (aipu.rtl.requant) is built from, one Amaranth component per module.

  control    the command's phases: CHECK, LOAD, LAND, VERDICT, STREAM, TAIL, FLUSH
  checks     the regions (CHECK) and every other refusal (VERDICT), each naming the first that holds
  records    the record store: the command's records loaded from PARAM and checked, in one bank per lane
             (1R1W each) from which every lane reads its channel's record in every cycle
  fetch      stage A of the stream: a group's ACC word and lane 0's channel (the records' window)
  lane       one lane's requantizer (bias, multiply, shift and round or float32 scale, zero point, clamp)
  window     stage B's write-back: the group's bytes merged into a two-word OUT window

interfaces.py holds the record layout and what the parts read alike from the command.
"""
