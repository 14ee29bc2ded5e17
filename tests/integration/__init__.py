"""Integration tests: the CLI as a subprocess, the sandbox and jail, the evaluation pool, Ray."""
