"""The named parts WDEC (aipu.rtl.wdec) is built from, one Amaranth component per module.

  header        the parts header: the K part lengths in front of a stream of several parts
  part_decoder  one part of a stream, from its DRAM words to its levels, with a one-level write buffer;
                WDEC has ``wdec.engines`` of them, each wiring:
    fetcher    DRAM words of the stream into a FIFO, handed on one a cycle
    window     the bit window: the next B·NEED_BITS stream bits, refilled a word a cycle; the padding check
    engine     the arithmetic decoder of 10.4.3.3: a cascade of B decision stages, up to B bins of a leaf a
               cycle (context, bypass or stuffing bins one a cycle)
    contexts   the context RAM in B banks with update_ctx, fresh at every command
    syntax     the part's sequence: engine start, header, CTU flags, leaves, stuffing, padding; it holds
               the profile's parts:
      elements   the header fields and the per-CTU flags the profile fixes
      leaves     the CTUs of the tensor and each CU's leaves in Morton order
      levels     the bins of one leaf's level (nzflag, sign, UEGk) to an int8 level, up to B a cycle
      writer     a level's byte at [O][KH][KW][I] in WEIGHT
  arbiters      the part decoders' (and the header's) DRAM reads onto WDEC's read port, and their levels onto
                its WEIGHT write port, each round robin

interfaces.py holds the signatures they connect through and what they share.
"""
