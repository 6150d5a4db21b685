"""The simulated server's queueing model, loadgen's schedule rebuilt from the seed, and loadgen's verdict rules."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.engines.simulated.queueing import (
    Protocol,
    SimConfig,
    SimModel,
    exponential_draws,
    loadgen_schedule,
    loadgen_verdict,
    max_valid_qps,
    min_passing,
    query_count,
    replay,
    valid_at,
)

SEED = 16159082839903944936   # v6.1 schedule_rng_seed


def test_one_request_alone() -> None:
    cfg = SimConfig(prefill_ms=10, decode_slots=4, tpot_ms=20, tpot_load=1.0, output_tokens=5)
    line = SimModel(cfg).admit(1.0)
    assert line.ttft_s == pytest.approx(0.010)
    assert line.tpot_s == pytest.approx(0.020 * (1 + 1 / 4))          # a batch of one out of four slots
    assert line.token_times() == pytest.approx([1.010, 1.035, 1.060, 1.085, 1.110])
    assert line.tpot_loadgen_s == pytest.approx(0.025)


def test_prefill_queues_in_arrival_order() -> None:
    model = SimModel(SimConfig(prefill_workers=1, prefill_ms=10))
    firsts = [model.admit(0.0).first_token for _ in range(3)]
    assert firsts == pytest.approx([0.010, 0.020, 0.030])
    two = SimModel(SimConfig(prefill_workers=2, prefill_ms=10))
    assert [two.admit(0.0).first_token for _ in range(3)] == pytest.approx([0.010, 0.010, 0.020])


def test_decode_waits_for_a_slot_and_the_wait_counts_in_tpot() -> None:
    cfg = SimConfig(prefill_workers=4, prefill_ms=1, decode_workers=1, decode_slots=2, tpot_ms=10, tpot_load=0.0,
                    output_tokens=3)
    model = SimModel(cfg)
    lines = [model.admit(0.0) for _ in range(3)]
    assert [x.decode_start for x in lines[:2]] == pytest.approx([0.001, 0.001])
    assert lines[2].decode_start == pytest.approx(0.021)               # the first slot frees after 2 x 10 ms
    assert lines[2].tpot_loadgen_s == pytest.approx((0.041 - 0.001) / 2)


def test_tpot_grows_with_the_batch() -> None:
    model = SimModel(SimConfig(prefill_workers=8, decode_slots=8, tpot_ms=10, tpot_load=1.0))
    tpots = [model.admit(0.0).tpot_s for _ in range(8)]
    assert tpots == sorted(tpots) and tpots[-1] == pytest.approx(0.020) and tpots[0] == pytest.approx(0.01125)


@pytest.mark.parametrize("cfg", [
    SimConfig(prefill_workers=1, prefill_ms=20, decode_workers=4, decode_slots=16, tpot_ms=5),     # prefill-bound
    SimConfig(prefill_workers=2, prefill_ms=2, decode_workers=2, decode_slots=8, tpot_ms=20),     # decode-bound
])
def test_capacity_is_the_saturation_throughput(cfg: SimConfig) -> None:
    """A burst far over capacity drains at exactly the capacity the formula gives."""
    n = 4000
    ttft, tpot = replay(cfg, np.zeros(n))
    done = ttft + tpot * (cfg.output_tokens - 1)
    steady = np.sort(done)[n // 4: 3 * n // 4]
    rate = (len(steady) - 1) / (steady[-1] - steady[0])
    assert rate == pytest.approx(cfg.capacity(), rel=0.02)


def test_the_live_model_and_the_replay_agree() -> None:
    cfg = SimConfig(prefill_workers=1, prefill_ms=3, decode_workers=2, decode_slots=16, tpot_ms=25)
    arrivals = loadgen_schedule(SEED, 80.0, 500)
    ttft, tpot = replay(cfg, arrivals)
    model = SimModel(cfg)
    lines = [model.admit(float(t)) for t in arrivals]
    assert [x.ttft_s for x in lines] == pytest.approx(ttft.tolist())
    assert [x.tpot_loadgen_s for x in lines] == pytest.approx(tpot.tolist())


def test_schedule_is_loadgen_s() -> None:
    """Checked against loadgen 6.0.17's own issue times (tests/integration/test_search_flow.py does it live)."""
    assert exponential_draws(SEED, 4) == pytest.approx([1.84365402, 0.45792369, 1.28586232, 0.71299472])
    slow, fast = loadgen_schedule(SEED, 10.0, 100), loadgen_schedule(SEED, 40.0, 100)
    assert slow[0] == 0 and slow == pytest.approx(fast * 4)          # one schedule, scaled by 1 / qps


@pytest.mark.parametrize(("qps", "duration_ms", "min_queries", "generated"), [
    (200, 100, 500, 512), (1000, 100, 2000, 2016), (100, 3000, 100, 320), (500, 1000, 460, 512), (300, 2000, 10, 608),
])
def test_query_count_matches_loadgen(qps: float, duration_ms: int, min_queries: int, generated: int) -> None:
    """`generated_query_count` of real loadgen 6.0.17 runs with a 32-sample QSL and the gpt-oss-120b mlperf.conf."""
    assert query_count(SEED, qps, duration_ms, min_queries, 32) == generated


def test_early_stopping_matches_loadgen() -> None:
    """Loadgen said "Processed 640 queries. Would need to run at least 198 (7527, 6606, 25801) more queries": h + t
    of its MinPassingQueriesFinder, which only whole numbers of over-latency queries t reproduce."""
    assert min_passing(0) == 459
    for total in (640 + 198, 640 + 7527, 640 + 6606, 640 + 25801):
        assert any(min_passing(t) + t == total for t in range(300))


def test_verdict() -> None:
    n = 600
    ok = np.full(n, 0.05)
    assert loadgen_verdict(ok, ok, ttft_limit_s=1, tpot_limit_s=0.08, last_scheduled_s=2, min_duration_ms=1000)
    late = ok.copy()
    late[:3] = 0.5                                       # 3 over the TPOT limit: p99 fine, early stopping not
    assert not loadgen_verdict(ok, late, ttft_limit_s=1, tpot_limit_s=0.08, last_scheduled_s=2, min_duration_ms=1000)
    assert not loadgen_verdict(ok, ok, ttft_limit_s=1, tpot_limit_s=0.08, last_scheduled_s=0.5, min_duration_ms=1000)
    assert not loadgen_verdict(ok[:400], ok[:400], ttft_limit_s=1, tpot_limit_s=0.08, last_scheduled_s=2,
                               min_duration_ms=1000)       # under 459 queries early stopping cannot pass


def test_max_valid_qps_is_the_boundary() -> None:
    cfg = SimConfig(prefill_workers=1, prefill_ms=3, decode_workers=2, decode_slots=16, tpot_ms=25)
    protocol = Protocol(3000, 80, 1000, 640, 32, SEED, max_tokens=8)
    known = max_valid_qps(cfg, protocol)
    assert 0.8 * cfg.capacity() < known < cfg.capacity()
    assert valid_at(cfg, protocol, known) and not valid_at(cfg, protocol, known * 1.01)


def test_invalid_config() -> None:
    with pytest.raises(ValueError, match="decode_slots"):
        SimConfig(decode_slots=0)
