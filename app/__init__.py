"""The application floor: the `aipu` command, the demo, benchmarks and cross-checks; imports every package below it."""
