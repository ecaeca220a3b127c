"""The named parts REQUANT (aipu.rtl.requant) is built from, one Amaranth component per module.

  control    the command's phases: CHECK, LOAD, LAND, VERDICT, STREAM, TAIL, FLUSH
  checks     the regions (CHECK) and every other refusal (VERDICT), each naming the first that holds
  records    the local record memory: the command's records loaded from PARAM and checked, one read
             port per lane
  fetch      stage A of the stream: a group's ACC word and each lane's channel (its record's address)
  lane       one lane's requantizer (bias, multiply, shift and round or float32 scale, zero point, clamp)
  window     stage B's write-back: the group's bytes merged into a two-word OUT window

interfaces.py holds the record layout and what the parts read alike from the command.
"""
