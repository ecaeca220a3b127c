"""The NNC payload of ``codec.deepcabac.reference.nnc`` in numba: ``kernels`` (the arithmetic coder, the
level loops and the parameter-set choice over arrays) and ``nnc_coder`` (the Python entry points, which turn
the kernels' error codes into CodecErrors). The tests hold it to the reference's bytes, levels and errors.
"""
