"""Orchestration: jobs combine the pure domain with the adapters (hosts, history)."""
