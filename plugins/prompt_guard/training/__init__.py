"""Offline data building and training for the prompt_guard classifier (run by hand; see DATA.md)."""
