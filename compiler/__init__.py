"""ONNX -> quantized IR -> per-unit command streams (built in a later issue)."""
