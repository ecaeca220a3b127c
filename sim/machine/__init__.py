"""AIPU hardware specification: widths, hardware configuration, command format and program files (the bottom floor)."""
