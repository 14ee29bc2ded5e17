"""LLM backends behind one `ChatModel` interface, with retries, pricing and configuration."""
