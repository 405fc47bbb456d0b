"""Optional observers of a measurement; each fails soft, and the reason goes to observer_errors."""


class ObserverUnavailable(RuntimeError):
    """The observer could not produce a result here; the message says why."""
