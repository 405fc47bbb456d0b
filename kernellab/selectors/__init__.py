"""Reads. Views, consumers and tasks ask here instead of building querysets themselves."""
