"""Unit tests: in-process only (no subprocess, sandbox, pool or LSP server), fast."""
