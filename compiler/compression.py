"""The policies by which `aipu compile --compress` turns conv weights into streams that WDEC decodes on chip
(docs/compiler.md, "Compressed weights"); apart from the lowering so that the CLI lists them without loading it."""
from __future__ import annotations

COMPRESSION = {             # ``compress`` policies (lower_model, `aipu compile --compress POLICY`)
    "hidden": "only in the layers whose decoding the compiler estimates to hide behind their compute: fewer "
              "DRAM bytes at no cost in cycles",
    "all": "in every layer, each weight tile whose stream is smaller: the fewest DRAM bytes, whatever decoding "
           "costs in cycles"}


def policy_argument(text: str) -> str:
    """`--compress POLICY` of the CLI: a policy of COMPRESSION, else an argparse error that says where a model
    path written after the flag belongs."""
    import argparse

    if text not in COMPRESSION:
        raise argparse.ArgumentTypeError(f"{text!r} is no policy ({', '.join(COMPRESSION)}); a model or other "
                                         "argument after a bare --compress is read as one: write it first, or "
                                         "--compress hidden")
    return text


def compression_policy(compress) -> str | None:
    """``compress`` as a policy of COMPRESSION, or None (raw weights) for None or False."""
    if compress is None or compress is False:
        return None
    if compress not in COMPRESSION:
        raise ValueError(f"compress = {compress!r}: expected None, False or one of {', '.join(COMPRESSION)}")
    return compress
