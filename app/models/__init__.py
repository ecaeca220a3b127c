"""Embedded models: the demo's trained digits CNN and the script that trains it."""
