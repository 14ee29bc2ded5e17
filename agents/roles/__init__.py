"""The roles of the agent team: what each is asked, and how an LLM or the offline passes answer."""
