"""Client worker processes: how requests in flight are shared, and what a pool refuses."""

import pytest

from tasks.harness.workers import PooledSUT, shares


def test_shares_add_up_and_differ_by_at_most_one() -> None:
    assert shares(64, 3) == [22, 21, 21]
    assert shares(8, 8) == [1] * 8
    for total, workers in ((1, 1), (7, 2), (512, 7), (100, 100)):
        parts = shares(total, workers)
        assert sum(parts) == total and max(parts) - min(parts) <= 1 and min(parts) >= 1


@pytest.mark.parametrize("workers", [1, 9])
def test_a_pool_needs_two_workers_and_a_request_for_each(workers: int) -> None:
    with pytest.raises(ValueError, match=f"harness_workers {workers}: must be at least 2 here and at most "
                                         r"max_concurrency \(8\)"):
        PooledSUT({}, workers=workers, max_concurrency=8, report_first_token=False)
