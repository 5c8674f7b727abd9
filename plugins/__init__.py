"""Plugins shipped with toolgate (see gateway.registry for the list)."""
