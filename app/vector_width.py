"""How wide the vectors of aipu's numba kernels are.

numba compiles for the host CPU through LLVM, whose tuning for Intel's AVX-512 server cores prefers 256-bit
vectors (as clang's default -mprefer-vector-width does, against the clock drop of the older cores), so the
kernels run half-width there; AMD's Zen 4 tuning already takes 512. The full width is what brings the golden
model's stride-2 depthwise layers level with onnxruntime on those cores (docs/performance.md). Every `aipu`
command and the test suite therefore ask numba for 512-bit vectors where the CPU has AVX-512F, through
NUMBA_CPU_FEATURES, which the processes they start inherit. A NUMBA_CPU_NAME or NUMBA_CPU_FEATURES of your
own is left as it is; AIPU_VECTOR_BITS=256 keeps LLVM's choice. The kernels' results do not depend on it:
their float32 sums are exact integers in any order (docs/arithmetic.md §3.4), the integer ones are exact.
"""
from __future__ import annotations

import os

VECTOR_BITS_VARIABLE = "AIPU_VECTOR_BITS"
VECTOR_BITS = ("512", "256")
NARROW_PREFERENCE = "prefer-256-bit"      # the LLVM tuning feature that halves the vectors


def use_full_width_vectors() -> None:
    """Ask numba for 512-bit vectors on an AVX-512 CPU unless $AIPU_VECTOR_BITS is 256 or numba's CPU is
    set already. numba's setting is for the whole process and takes effect for what it compiles after this:
    as a library, call it before the first aipu kernel runs. ValueError names a bad $AIPU_VECTOR_BITS."""
    bits = os.environ.get(VECTOR_BITS_VARIABLE, VECTOR_BITS[0])
    if bits not in VECTOR_BITS:
        raise ValueError(f"${VECTOR_BITS_VARIABLE} = {bits!r}: expected one of {', '.join(VECTOR_BITS)}")
    if bits == "256" or "NUMBA_CPU_NAME" in os.environ or "NUMBA_CPU_FEATURES" in os.environ:
        return
    from llvmlite import binding

    features = binding.get_host_cpu_features()
    if not features.get("avx512f", False):
        return
    os.environ["NUMBA_CPU_FEATURES"] = f"{features.flatten()},-{NARROW_PREFERENCE}"
    from numba.core import config

    config.reload_config()      # numba read its environment at import
