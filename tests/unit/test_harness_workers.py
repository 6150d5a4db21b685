"""Client worker processes: how requests in flight are shared, what a pool refuses, and with an engine of replicas
which worker owns which replica and how samples are dealt to workers."""

import json

import pytest

from tasks.harness.workers import WHOLESALE, PooledSUT, fewest_per_replica, shares, split, worker_count, worker_setups


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


def test_each_worker_owns_a_share_of_the_replicas_never_more_workers_than_replicas() -> None:
    replicas = [{"name": f"replica-{i}", "base_url": f"http://n:{8000 + i}", "node": "", "gpu_ids": []}
                for i in range(5)]
    setups = worker_setups({"spec": "{}", "endpoint": json.dumps({"base_url": "x", "replicas": replicas})}, 2)
    owned = [[r["name"] for r in json.loads(s["endpoint"])["replicas"]] for s in setups]
    assert owned == [["replica-0", "replica-2", "replica-4"], ["replica-1", "replica-3"]]
    assert worker_count(8, 5) == 5 and worker_count(4, 5) == 4 and worker_count(4, 0) == 4
    assert split(64, [3, 2]) == [38, 26] and split(3, [1, 1, 1]) == [1, 1, 1]


def test_samples_go_to_the_worker_with_the_fewest_outstanding_per_live_replica() -> None:
    assert fewest_per_replica([0, 0], [3, 2], 1) == [1, 0]
    assert fewest_per_replica([6, 0], [3, 2], 1) == [0, 1]        # 7/3 > 1/2
    assert fewest_per_replica([0, 0, 0], [2, 0, 2], 10) == [5, 0, 5]   # a worker with no live replica gets none
    assert fewest_per_replica([4, 0], [2, 2], 6) == [1, 5]        # the lagging worker first
    big = fewest_per_replica([0, 0, 0], [3, 3, 2], WHOLESALE * 2)   # an Offline query: in proportion, no loop
    assert sum(big) == WHOLESALE * 2 and big == [3072, 3072, 2048]
