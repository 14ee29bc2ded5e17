"""Run untrusted candidate code in a jailed, limited child process."""
