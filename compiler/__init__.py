"""The ONNX compiler: a float or pre-quantized model -> calibrated, quantized IR -> one command program for the
units, with its DRAM image (docs/compiler.md)."""
