"""Upstream model clients: `openai` (native fast path), `litellm` (lazy), `inspect` (built-in)."""
