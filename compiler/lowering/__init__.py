"""Lowering the quantized IR to one command program: a DRAM plan, and one module per operator kind that
tiles its operator for the buffers and emits per-unit commands with dependency tokens (docs/compiler.md §4)."""
