"""The codec's reference: the standard's decoder and our encoder in plain Python, close to the text.

``engine`` (the arithmetic engine), ``binarization``, ``elements`` (Tables 337/338, the one element table),
``element_coder`` (one element through the engine), and the syntax: ``headers`` (stream and layer headers,
limits), ``geometry`` (CTUs, CUs, tree shapes), ``tree_coder`` (the four CU trees), ``sublayer_coder`` (the
CTUs of a weight sublayer) and ``nnc`` (the whole stream). ``codec.compiled`` is the same decoder and tree
coders in numba; the tests hold the two to the same bins.
"""
