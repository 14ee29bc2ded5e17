"""Rewrite passes. Each turns the current kernel into a complete ModelNew module source."""
