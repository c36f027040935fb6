"""Shared test helpers: real processes, real pipes, deadlines."""
