"""The installed onnx's own node test cases, collected once per test process (collecting takes seconds)."""
from __future__ import annotations

import functools
import warnings


@functools.lru_cache(maxsize=1)
def onnx_node_cases() -> tuple:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the generators of unrelated cases warn about float overflow
        warnings.simplefilter("ignore")
        return tuple(collect_testcases(None))
