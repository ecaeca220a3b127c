"""The codec's compiled fast path: the reference decoder's hot loops and the encoder's trees in numba.

``jit_cache`` (the njit decorator and its cache), ``contexts`` (the context array, the ctxIdxInc rules and
the element table as numbers, from ``codec.reference.elements``), ``aec_decoder`` / ``aec_encoder`` (the
arithmetic engine and the binarisations), ``tree_coders`` (the four CU trees, both directions),
``sublayer_decoder`` (every CTU of a weight sublayer in one call) and ``element_io`` (the ElementIO classes
the reference syntax codes through). Each repeats the reference's arithmetic and element order; the tests
hold the two to the same bins, bytes and errors.
"""
