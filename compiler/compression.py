"""The policies by which `aipu compile --compress` turns conv weights into streams that WDEC decodes on chip
(docs/compiler.md, "Compressed weights"); apart from the lowering so that the CLI lists them without loading it."""
from __future__ import annotations

COMPRESSION = {             # ``compress`` policies (lower_model, `aipu compile --compress POLICY`)
    "hidden": "only the layers whose estimated decoding hides behind their compute (conv_plan.plan_tiles): "
              "fewer DRAM bytes at no cost in cycles",
    "all": "every weight tile whose stream is smaller: the fewest DRAM bytes, whatever decoding costs"}


def compression_policy(compress) -> str | None:
    """``compress`` as a policy of COMPRESSION, or None (raw weights) for None or False."""
    if compress is None or compress is False:
        return None
    if compress not in COMPRESSION:
        raise ValueError(f"compress = {compress!r}: expected None, False or one of {', '.join(COMPRESSION)}")
    return compress
