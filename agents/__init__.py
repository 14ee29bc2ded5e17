"""Kernel Agent's agents: roles, search, the verification harness and the CLI."""

__version__ = "0.1.0"
