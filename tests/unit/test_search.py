"""The peak-QPS search as plain functions: bracketing, bisection, confirmation, and the probe cache."""

from __future__ import annotations

import math

import pytest

from submission.errors import RunFailed
from tasks.engines.simulated.queueing import Protocol, SimConfig, judge, max_valid_qps
from tasks.tuning.bisection import Probe, SearchSettings, round_qps, search

SEED = 16159082839903944936   # v6.1 schedule_rng_seed (submission/rules/v6.1.yaml)


class Threshold:
    """A judge whose probes pass up to `probe_max` and whose full-length runs pass up to `confirm_max`."""

    def __init__(self, probe_max: float, confirm_max: float | None = None) -> None:
        self.probe_max, self.confirm_max = probe_max, confirm_max if confirm_max is not None else probe_max
        self.calls: list[tuple[float, str]] = []

    def __call__(self, qps: float, stage: str) -> Probe:
        self.calls.append((qps, stage))
        limit = self.probe_max if stage == "probe" else self.confirm_max
        return Probe(qps=qps, stage=stage, valid=qps <= limit, duration_s=10.0 if stage == "probe" else 60.0)


@pytest.mark.parametrize("true_max", [3.3, 41.0, 77.7, 99.9, 140.0])
@pytest.mark.parametrize("precision", [0.01, 0.02, 0.05])
def test_search_lands_within_precision_below_the_threshold(true_max: float, precision: float) -> None:
    j = Threshold(true_max)
    result = search(j, start_qps=100.0, settings=SearchSettings(precision=precision))
    assert result.confirmed
    assert true_max * (1 - precision) - 1e-3 <= result.qps <= true_max
    low, high = result.bracket
    assert high is None or high / low - 1 <= precision or round_qps(math.sqrt(low * high)) in (low, high)
    assert [c for c in j.calls if c[1] == "confirm"] == [(result.qps, "confirm")]   # one confirmation, it passed


def test_bracket_steps_down_from_the_offline_rate_then_bisects() -> None:
    j = Threshold(50.0)
    result = search(j, 100.0, SearchSettings(precision=0.02, step_down=0.8))
    probes = [q for q, stage in j.calls if stage == "probe"]
    assert probes[:4] == [100.0, 80.0, 64.0, 51.2]      # fails while stepping down by 0.8
    assert probes[4] == 40.96                            # the first pass closes the bracket [40.96, 51.2]
    assert all(40.96 <= q <= 51.2 for q in probes[5:])   # then bisection stays inside it
    assert result.bracket[0] <= 50.0 < result.bracket[1]


def test_bracket_steps_up_when_the_start_passes() -> None:
    j = Threshold(170.0)
    result = search(j, 100.0, SearchSettings(precision=0.02, step_up=1.25))
    assert [q for q, _ in j.calls[:4]] == [100.0, 125.0, 156.2, 195.2]   # each step rounded to 4 digits
    assert 170 * 0.98 <= result.qps <= 170


def test_failed_confirmation_steps_down_and_confirms_lower() -> None:
    """Short probes are optimistic (they pass 60), full-length runs only pass 50: the search must end at or under
    50, within precision, and every final answer must come from a passing full-length run."""
    j = Threshold(60.0, confirm_max=50.0)
    result = search(j, 100.0, SearchSettings(precision=0.02))
    assert result.confirmed and 50 * 0.98 <= result.qps <= 50.0
    confirms = [(q, stage) for q, stage in j.calls if stage == "confirm"]
    assert confirms[0][0] > 50                           # the probe answer failed its confirmation
    assert result.confirmation is not None and result.confirmation.valid
    assert "stepped down" in result.message


def test_confirmation_budget_runs_out() -> None:
    j = Threshold(60.0, confirm_max=1.0)
    result = search(j, 100.0, SearchSettings(precision=0.02, max_confirmations=3))
    assert not result.confirmed and result.qps is None
    assert len([c for c in j.calls if c[1] == "confirm"]) == 3   # the first confirmation and two step-downs


def test_no_rate_passes_is_an_error_with_a_fix() -> None:
    with pytest.raises(RunFailed) as e:
        search(Threshold(0.0), 100.0, SearchSettings(max_probes=5))
    assert "no probe passed" in str(e.value) and e.value.fix


def test_cached_probes_do_not_count_against_the_budget() -> None:
    class Cached(Threshold):
        def __call__(self, qps: float, stage: str) -> Probe:
            return super().__call__(qps, stage).model_copy(update={"cached": True})

    result = search(Cached(42.0), 100.0, SearchSettings(precision=0.01, max_probes=2))
    assert result.confirmed and result.runs == 0 and result.run_seconds == 0


def test_rates_are_rounded_to_four_digits() -> None:
    assert round_qps(12.345678) == 12.35 and round_qps(1234567) == 1235000.0
    with pytest.raises(ValueError):
        round_qps(0)


def test_search_on_the_model_finds_loadgen_s_known_maximum() -> None:
    """Judged by the queueing model and loadgen's own rules replayed on loadgen's own schedule: the search lands
    within its precision under the highest rate loadgen would call VALID."""
    cfg = SimConfig(prefill_workers=1, prefill_ms=3, decode_workers=2, decode_slots=16, tpot_ms=25, tpot_load=1.0)
    probe = Protocol(3000, 80, 1000, 640, 32, SEED, max_tokens=8)
    full = Protocol(3000, 80, 1000, 1024, 32, SEED, max_tokens=8)
    known = max_valid_qps(cfg, full)
    result = search(judge(cfg, probe, full), cfg.capacity(8), SearchSettings(precision=0.03))
    assert result.confirmed
    assert known * (1 - 0.03) <= result.qps <= known


def test_refine_up_when_short_probes_are_pessimistic() -> None:
    """Probes fail above 45 but full-length runs pass up to 52: with refine_up the full-length runs climb there."""
    plain = search(Threshold(45.0, confirm_max=52.0), 100.0, SearchSettings(precision=0.02))
    assert 45 * 0.98 <= plain.qps <= 45                  # without it the answer stays at the probes' peak
    result = search(Threshold(45.0, confirm_max=52.0), 100.0, SearchSettings(precision=0.02, refine_up=True))
    assert 52 * 0.98 <= result.qps <= 52 and "refined upwards" in result.message


def test_interpolation_uses_the_margins_but_stays_inside_the_bracket() -> None:
    from tasks.tuning.bisection import _midpoint

    assert _midpoint(50.0, 100.0) == pytest.approx(70.71, abs=0.01)                  # geometric midpoint
    near_high = _midpoint(50.0, 100.0, m_low=0.5, m_high=1.01)                         # the limit is near 100
    assert near_high == pytest.approx(50 * 2 ** 0.75, abs=0.01)                       # clamped to 3/4 of the way
    inside = _midpoint(50.0, 100.0, m_low=0.8, m_high=1.25)                            # crosses half-way
    assert inside == pytest.approx(70.71, abs=0.01)
    early = _midpoint(50.0, 100.0, m_low=0.9, m_high=0.98)     # failed by early stopping, p99 under the limit
    assert early == pytest.approx(70.71, abs=0.01)
    assert _midpoint(50.0, 50.01) is None
