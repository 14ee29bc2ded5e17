"""Kernel Agent's memory: the skill library, experiences and the per-task logbook (SQLite)."""
