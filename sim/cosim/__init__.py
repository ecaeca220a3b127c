"""Co-simulation: run a program on the RTL (Amaranth's simulator, or Verilog under cocotb) and compare every
buffer and the cycles of every command with the interpreter and the documented formulas."""
