"""Performance reports of a compiled program (docs/cycle-model.md, "Reports"): what the cycle model finds per
layer and per unit (``analysis``), as schema-versioned JSON and CSV, and as one self-contained HTML page with
its plots (``html``)."""
