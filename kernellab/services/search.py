"""Glue between the search driver (search_engine) and the database. Filled in with the driver."""
from __future__ import annotations


def run_advance(*, run_id: int) -> str:
    raise NotImplementedError
