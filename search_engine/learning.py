"""How a search learns from its own measurements: the surrogate is retrained on the run's measured
children (after 1, 2, 4, 8 ... rows, then every `retrain_every`), and the forecasts that still
stand (parked children, children accepted without a measurement) are revised with what it learned.

These functions are the driver's learning half: they read and change the driver's tree, counters
and surrogate, and publish through it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from search_engine.events import EventKind, ForecastMade
from search_engine.node_states import PENDING_STATES, NodeState
from search_engine.surrogates.base import Forecast, surrogate_id

if TYPE_CHECKING:
    from search_engine.driver import SearchDriver

# A revised forecast is published when a bin's probability moved at least this much (or the bin did).
REVISION_SHOWN_FROM = 0.05


def learns(driver: "SearchDriver") -> bool:
    return hasattr(driver.surrogate, "learn")


def training_rows(driver: "SearchDriver", node_ids: list[int]) -> list[dict]:
    return [{"request": driver.forecast_request(nid), "speedup": driver.tree.nodes[nid].speedup} for nid in node_ids]


def relearn(driver: "SearchDriver") -> None:
    """A resumed run's surrogate learns from the same rows again, so that it forecasts alike."""
    if driver.retrained_on and learns(driver):
        driver.surrogate.learn(training_rows(driver, driver.retrained_on))


def retrain_if_due(driver: "SearchDriver") -> None:
    if not learns(driver) or driver.settings.retrain_every <= 0:
        return
    measured = sorted(n.id for n in driver.tree.nodes.values()
                      if n.state == NodeState.MEASURED and n.speedup is not None and n.parent_id is not None)
    # Early rows teach the most: retrain after 1, 2, 4, 8 ... measured rows, then every retrain_every.
    due = min(driver.settings.retrain_every, max(1, len(driver.retrained_on)))
    if len(measured) - len(driver.retrained_on) >= due:
        driver.retrained_on = measured
        driver.surrogate.learn(training_rows(driver, measured))
        revise_forecasts(driver, len(measured))


def revise_forecasts(driver: "SearchDriver", rows: int) -> None:
    """After the surrogate learned from this run, the children that still stand on a forecast are
    forecast again, so that the policy, the tree's priors and provisional values use what was
    learned. A revision that moves the forecast is published like any forecast, marked revised; a
    pruned node whose new forecast no longer says it is slower than its parent is set free."""
    tree, bins = driver.tree, driver.bins
    # Those on their way to the GPU too: a step's measurements come back one by one, and the search benchmark's
    # (synchronous) port revises a step's second choice after its first has come back, before asking for it. Its
    # forecast and prior then read what was learned, wherever the measurements are made.
    ids = [n.id for n in tree.nodes.values()
           if n.state in (NodeState.FORECAST, NodeState.ACCEPTED_BY_FORECAST, *PENDING_STATES) and n.forecast]
    if not ids:
        return
    forecasts = driver.surrogate.forecast_many([driver.forecast_request(nid) for nid in ids])
    driver.counters.forecast_revisions += len(ids)
    threshold = driver.policy.threshold(tree)
    for nid, forecast in zip(ids, forecasts):
        node = tree.nodes[nid]
        # Measured against the forecast last shown, not the last one made: small revisions that are not shown
        # must not add up to a forecast the page no longer shows.
        old = Forecast.from_dict(node.shown_forecast or node.forecast)
        node.shown_forecast = node.shown_forecast or node.forecast
        node.forecast = forecast.to_dict()
        if forecast.abstained:
            continue
        expected = forecast.expected_speedup(bins)
        tree.set_prior_score(nid, tree.reward_of(expected))
        if node.state == NodeState.ACCEPTED_BY_FORECAST:
            tree.set_provisional(nid, expected)
        moved = old.abstained or old.bin != forecast.bin or \
            max(abs(a - b) for a, b in zip(old.probabilities, forecast.probabilities)) >= REVISION_SHOWN_FROM
        if moved:
            node.shown_forecast = node.forecast
            driver._publish(ForecastMade(type=EventKind.FORECAST, node_id=nid, forecast=node.forecast,
                                         surrogate=surrogate_id(driver.surrogate), revised=True,
                                         reason=f"revised after learning from {rows} of this run's measurements"))
        if node.pruned:
            parent = driver.policy.parent_speedup(tree, node)
            still = forecast.confidence >= threshold and parent is not None and bins.upper(forecast.bin) <= parent
            if not still:
                # The forecast that pruned it has changed: its branch may be searched again.
                node.pruned = False
                driver.counters.unpruned += 1
                driver._set_state(node, NodeState.ACCEPTED_BY_FORECAST,
                                  f"no longer pruned: the forecast revised after {rows} measurements is bin "
                                  f"{forecast.bin} with confidence {forecast.confidence:.2f}")
