"""Frenzy common package: contracts, bus, config, domain types, client and CLI.

Every service imports from here; nothing here imports a service.
"""
