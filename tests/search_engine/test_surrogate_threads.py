"""The learned surrogate limits OpenMP to its thread count through one thread-pool controller: finding
the loaded thread pools anew cost about 10 ms a call, most of a search's batch of 16 forecasts."""
from threadpoolctl import threadpool_info

from search_engine.surrogates import learned


def test_the_thread_pools_are_found_once_and_limited_each_time(monkeypatch):
    made = []

    class CountingController(learned.ThreadpoolController):
        def __init__(self):
            made.append(self)
            super().__init__()

    monkeypatch.setattr(learned, "ThreadpoolController", CountingController)
    monkeypatch.setattr(learned, "_THREADPOOLS", [])
    for _ in range(3):
        with learned._openmp_threads(1):
            openmp = [pool for pool in threadpool_info() if pool["user_api"] == "openmp"]
            assert all(pool["num_threads"] == 1 for pool in openmp)
    assert len(made) == 1
