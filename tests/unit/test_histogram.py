"""The one histogram: the client's metrics, the event log and the twin's /metrics count with the same class."""

from __future__ import annotations

from tokenmill.histogram import Histogram
from tokenmill.sim import metrics


def test_observations_land_in_their_bucket_and_round_trip_through_the_event_log() -> None:
    hist = Histogram((1, 10))
    hist.observe(0.5)
    hist.observe(5, n=3)
    hist.observe(50)
    assert hist.counts == [1, 3, 1] and hist.count == 5 and hist.total == 0.5 + 15 + 50
    assert hist.cumulative() == [(1.0, 1), (10.0, 4), (float("inf"), 5)]
    back = Histogram.from_dict(hist.as_dict())
    assert back.counts == hist.counts and back.total == hist.total and back.quantile(0.5) == hist.quantile(0.5)


def test_the_twins_histogram_is_the_shared_one_with_its_exposition() -> None:
    hist = metrics.Histogram((1, 10))
    assert isinstance(hist, Histogram)
    hist.observe(5, n=2)
    fam = hist.family("sglang:x", "x", {"model_name": "m"})
    buckets = {s.labels["le"]: s.value for s in fam.samples if s.name.endswith("_bucket")}
    assert buckets == {"1.0": 0.0, "10.0": 2.0, "+Inf": 2.0}
