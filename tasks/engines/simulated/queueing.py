"""A queueing model of a disaggregated LLM server whose capacity is known exactly, for tests and the benchmark.

The model (`SimConfig`): `prefill_workers` FIFO workers each take `prefill_ms` per request; the first token leaves
when prefill ends. The request then waits (FIFO) for one of `decode_slots` places in the batch of one of
`decode_workers` decode workers, and emits its other tokens there, one per `tpot_ms x (1 + tpot_load x b / slots)`,
where `b` is the batch size it joined (so TPOT grows with load). Every timeline is causal: a request's token times
are fixed when it arrives, from the requests before it, so the live server (`tasks.engines.simulated.server`) sleeps
until each time and `replay` computes the very same numbers offline.

Loadgen's Server schedule is deterministic: arrival i is at `sum(E_0..E_{i-1}) / target_qps`, where the E are
exponential draws from `std::mt19937(schedule_rng_seed)` (libstdc++ `generate_canonical<double, 53>`: two 32-bit
draws per value). `loadgen_schedule` rebuilds it bit for bit from the round's seed, `loadgen_verdict` applies
loadgen's own rules (p99 TTFT/TPOT, early stopping, min duration; `loadgen/results.cc`, `early_stopping.cc`), so
`max_valid_qps` is the highest rate loadgen calls VALID for this model: the known answer a search must find.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import asdict, dataclass

import numpy as np

PERCENTILE = 0.99          # loadgen server_target_latency_percentile (mlperf.conf *.Server: 0.99)
CONFIDENCE = 0.99          # loadgen early_stopping.cc: confidence 0.99, tolerance 0


@dataclass(frozen=True)
class SimConfig:
    prefill_workers: int = 1
    prefill_ms: float = 10.0
    decode_workers: int = 1
    decode_slots: int = 16
    tpot_ms: float = 10.0
    tpot_load: float = 1.0         # a full batch is (1 + tpot_load) times slower per token than an empty one
    output_tokens: int = 8         # tokens per answer (the request's max_tokens caps it)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < (0 if name == "tpot_load" else 1 if isinstance(value, int) else 1e-9):
                raise ValueError(f"{name} must be positive, got {value}")

    def tokens(self, max_tokens: int | None) -> int:
        return self.output_tokens if max_tokens is None else max(1, min(self.output_tokens, max_tokens))

    def prefill_capacity(self) -> float:
        """Requests per second the prefill pool finishes when it never idles."""
        return self.prefill_workers * 1000.0 / self.prefill_ms

    def decode_capacity(self, tokens: int | None = None) -> float:
        """Requests per second the decode pool finishes when every batch is full."""
        n = self.tokens(tokens)
        if n <= 1:
            return math.inf
        per_request_s = (n - 1) * self.tpot_ms * (1 + self.tpot_load) / 1000.0
        return self.decode_workers * self.decode_slots / per_request_s

    def capacity(self, tokens: int | None = None) -> float:
        """Saturation throughput (requests/s): what an Offline run approaches. Latency limits cap Server lower."""
        return min(self.prefill_capacity(), self.decode_capacity(tokens))


@dataclass(frozen=True)
class Timeline:
    """When one request's tokens leave the server (seconds on the model's clock)."""

    arrival: float
    first_token: float
    decode_start: float
    tpot_s: float
    tokens: int

    def token_times(self) -> list[float]:
        return [self.first_token] + [self.decode_start + k * self.tpot_s for k in range(1, self.tokens)]

    @property
    def ttft_s(self) -> float:
        return self.first_token - self.arrival

    @property
    def tpot_loadgen_s(self) -> float:
        """Loadgen's TPOT: (end - first token) / (tokens - 1); 0 for one-token answers."""
        return 0.0 if self.tokens <= 1 else (self.token_times()[-1] - self.first_token) / (self.tokens - 1)


class SimModel:
    """The server's state; `admit` must be called in arrival order (the live server does, under one event loop)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.prefill_free = [0.0] * config.prefill_workers               # heap of worker-free times
        self.decode_ends: list[list[float]] = [[0.0] * config.decode_slots for _ in range(config.decode_workers)]
        self.admitted = 0

    def admit(self, arrival: float, max_tokens: int | None = None, tokens: int | None = None) -> Timeline:
        """The timeline of a request arriving at `arrival`: `tokens` long when the answer's length is known
        (known answers), else the model's `output_tokens` capped by `max_tokens`."""
        c = self.config
        n = c.tokens(max_tokens) if tokens is None else max(1, tokens)
        start = max(arrival, heapq.heappop(self.prefill_free))
        first = start + c.prefill_ms / 1000.0
        heapq.heappush(self.prefill_free, first)
        self.admitted += 1
        if n <= 1:
            return Timeline(arrival, first, first, 0.0, n)
        begin = max(first, min(ends[0] for ends in self.decode_ends))
        ready = [w for w, ends in enumerate(self.decode_ends) if ends[0] <= begin]
        worker = min(ready, key=lambda w: (sum(e > begin for e in self.decode_ends[w]), w))
        ends = self.decode_ends[worker]
        batch = sum(e > begin for e in ends) + 1
        tpot = c.tpot_ms / 1000.0 * (1 + c.tpot_load * batch / c.decode_slots)
        heapq.heapreplace(ends, begin + (n - 1) * tpot)
        return Timeline(arrival, first, begin, tpot, n)


def replay(config: SimConfig, arrivals: np.ndarray, max_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) in seconds of every request arriving at `arrivals` (sorted, seconds), as loadgen measures them."""
    model = SimModel(config)
    lines = [model.admit(float(t), max_tokens) for t in arrivals]
    return np.array([x.ttft_s for x in lines]), np.array([x.tpot_loadgen_s for x in lines])


def exponential_draws(seed: int, count: int) -> np.ndarray:
    """The first `count` draws of libstdc++ `std::exponential_distribution<double>(1)` on `std::mt19937(seed)`."""
    bits = np.random.MT19937()
    bits._legacy_seeding(seed & 0xFFFFFFFF)           # std::mt19937 keeps the seed modulo 2^32, as numpy's does
    raw = bits.random_raw(2 * count).astype(np.float64)
    u = (raw[0::2] + raw[1::2] * 2.0**32) / 2.0**64   # generate_canonical<double, 53> over two 32-bit draws
    u = np.minimum(u, np.nextafter(1.0, 0.0))
    return -np.log1p(-u)


@functools.lru_cache(maxsize=8)
def _unit_schedule(seed: int, count: int) -> np.ndarray:
    draws = exponential_draws(seed, count)
    return np.concatenate([[0.0], np.cumsum(draws[:-1])])


def loadgen_schedule(seed: int, qps: float, count: int) -> np.ndarray:
    """Scheduled times (s) of the first `count` Server queries at `qps`: query 0 at 0, then exponential gaps."""
    return _unit_schedule(seed, count) / qps


def query_count(seed: int, qps: float, min_duration_ms: int, min_queries: int, sample_count: int,
                equal_issue: bool = True) -> int:
    """How many queries loadgen generates for a Server run (`GenerateQueries`): until the last one is scheduled at
    or after min_duration and there are min_queries of them; with `sample_concatenate_permutation` (equal issue)
    min_queries is padded, and grown, by whole multiples of the performance sample count."""
    duration = min_duration_ms / 1000.0
    target = min_queries
    if equal_issue and target % sample_count:
        target += sample_count - target % sample_count
    need = max(target, int(duration * qps * 1.2) + 64)
    while True:
        times = loadgen_schedule(seed, qps, need)
        count = target
        while count <= need and times[count - 1] < duration:
            count += sample_count if equal_issue else 1
        if count <= need:
            return count
        need *= 2


@functools.lru_cache(maxsize=256)
def min_passing(overlatency: int, percentile: float = PERCENTILE, confidence: float = CONFIDENCE) -> int:
    """Loadgen's `MinPassingQueriesFinder`: the fewest in-limit queries that, with `overlatency` over the limit,
    show the percentile is met at the confidence: min h with P(Binomial(h + t, 1 - p) <= t) < 1 - c."""
    def odds(h: int) -> float:
        n, q = h + overlatency, 1 - percentile
        terms = (math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * math.log(q)
                 + (n - x) * math.log(percentile) for x in range(overlatency + 1))
        return sum(math.exp(t) for t in terms)

    lo, hi = 1, 1
    while odds(hi) >= 1 - confidence:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if odds(mid) >= 1 - confidence else (lo, mid)
    return lo


def _percentile_ok(values: np.ndarray, limit: float) -> bool:
    ordered = np.sort(values)
    return bool(ordered[int(len(ordered) * PERCENTILE)] <= limit)


def _early_stopping_ok(values: np.ndarray, limit: float) -> bool:
    over = int(np.count_nonzero(values > limit))
    return len(values) >= min_passing(over) + over


def loadgen_reasons(ttft_s: np.ndarray, tpot_s: np.ndarray, *, ttft_limit_s: float, tpot_limit_s: float,
                    last_scheduled_s: float, min_duration_ms: int) -> list[str]:
    """Why loadgen would call a Server run with token latencies INVALID, in the words of its detail log (what
    submission.results.logs reads from a real one): a p99 over its limit, early stopping not met, min_duration not met;
    none when VALID."""
    reasons = []
    for name, values, limit in (("TTFT", ttft_s, ttft_limit_s), ("TPOT", tpot_s, tpot_limit_s)):
        if not _percentile_ok(values, limit):
            reasons.append(f"{name} constrain not met: Reduce target QPS to improve latency.")
        if not _early_stopping_ok(values, limit):
            reasons.append(f"{name} early stopping: not met with {len(values)} queries")
    if last_scheduled_s < min_duration_ms / 1000.0:
        reasons.append("min duration not met")
    return reasons


def loadgen_verdict(ttft_s: np.ndarray, tpot_s: np.ndarray, *, ttft_limit_s: float, tpot_limit_s: float,
                    last_scheduled_s: float, min_duration_ms: int) -> bool:
    """Loadgen's VALID for a Server run with token latencies: p99 TTFT and TPOT within their limits, early stopping
    met for both, and the last query scheduled at or after min_duration."""
    return not loadgen_reasons(ttft_s, tpot_s, ttft_limit_s=ttft_limit_s, tpot_limit_s=tpot_limit_s,
                               last_scheduled_s=last_scheduled_s, min_duration_ms=min_duration_ms)


@dataclass(frozen=True)
class Protocol:
    """What a Server run looks like to loadgen: its limits, its length and the seed of its schedule."""

    ttft_limit_ms: float
    tpot_limit_ms: float
    min_duration_ms: int
    min_queries: int
    sample_count: int                  # performance sample count (the QSL size loadgen draws from)
    schedule_seed: int
    max_tokens: int | None = None
    equal_issue: bool = True           # mlperf.conf sample_concatenate_permutation (1 for the LLM benchmarks)


def valid_at(config: SimConfig, protocol: Protocol, qps: float) -> bool:
    """Whether loadgen calls a Server run of `protocol` at `qps` against the model VALID."""
    n = query_count(protocol.schedule_seed, qps, protocol.min_duration_ms, protocol.min_queries,
                    protocol.sample_count, protocol.equal_issue)
    arrivals = loadgen_schedule(protocol.schedule_seed, qps, n)
    ttft, tpot = replay(config, arrivals, protocol.max_tokens)
    return loadgen_verdict(ttft, tpot, ttft_limit_s=protocol.ttft_limit_ms / 1000, last_scheduled_s=arrivals[-1],
                           tpot_limit_s=protocol.tpot_limit_ms / 1000, min_duration_ms=protocol.min_duration_ms)


def max_valid_qps(config: SimConfig, protocol: Protocol, *, resolution: float = 0.001) -> float:
    """The highest target QPS (to `resolution`, relative) loadgen calls VALID: the known answer of a peak search.
    Found by a downward scan in 3 % steps from a failing rate over the saturation capacity (short runs can pass
    over it: a queue needs time to build), then bisection within the last step."""
    high = config.capacity(protocol.max_tokens) * 1.25
    while valid_at(config, protocol, high) and high < config.capacity(protocol.max_tokens) * 20:
        high *= 1.25
    step = 0.97
    qps = high
    while not valid_at(config, protocol, qps):
        qps *= step
        if qps < high * 1e-3:
            return 0.0
    low, high = qps, qps / step
    while high / low - 1 > resolution:
        mid = math.sqrt(low * high)
        low, high = (mid, high) if valid_at(config, protocol, mid) else (low, mid)
    return low
