"""The offline backend: planner and executor built from mechanical rewrite passes, no LLM."""
