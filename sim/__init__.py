"""AIPU simulation: the bit-exact golden model, the command format, the interpreter and reports."""
