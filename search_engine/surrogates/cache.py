"""Pluggable forecast caches keyed by the (surrogate, reference, candidate, hardware) hash."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Protocol


class ForecastCache(Protocol):
    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, forecast: dict) -> None: ...


class MemoryCache:
    def __init__(self) -> None:
        self._data: dict[str, dict] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        with self._lock:
            value = self._data.get(key)
            return dict(value) if value is not None else None

    def put(self, key: str, forecast: dict) -> None:
        with self._lock:
            self._data[key] = dict(forecast)

    def __len__(self) -> int:
        return len(self._data)


class JsonFileCache(MemoryCache):
    """In memory, written through to one JSON file (replaced atomically on every put)."""

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.exists():
            try:
                self._data = json.loads(self.path.read_text())
            except (json.JSONDecodeError, OSError):
                self._data = {}

    def put(self, key: str, forecast: dict) -> None:
        super().put(key, forecast)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".forecast-cache-")
            with os.fdopen(fd, "w") as fh:
                json.dump(self._data, fh)
            os.replace(tmp, self.path)


class SqliteCache:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        with sqlite3.connect(self.path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS forecasts (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def get(self, key: str) -> dict | None:
        with self._lock, sqlite3.connect(self.path) as db:
            row = db.execute("SELECT value FROM forecasts WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, forecast: dict) -> None:
        with self._lock, sqlite3.connect(self.path) as db:
            db.execute("INSERT OR REPLACE INTO forecasts (key, value) VALUES (?, ?)", (key, json.dumps(forecast)))
