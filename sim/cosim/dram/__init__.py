"""The testbench DRAM: an AXI4 slave with exactly stated, configurable timing, in three forms that agree cycle
for cycle (docs/rtl-cosim.md, "DRAM models"): the timing core in plain Python (``model``), its adapters to cocotb
(``cocotb_dram``, imported on its own: it needs cocotb's running simulator) and to Amaranth's simulator
(``amaranth_dram``), and Amaranth logic for fast Verilog runs (``rtl``). ``trace`` records and checks
handshakes."""
