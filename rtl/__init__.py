"""Amaranth HDL descriptions of the AIPU's fixed-function units (built in later issues)."""
