"""Backends move messages between workers and keep time: ``threads`` (default)."""
