"""The cluster tier's workers each drive a mini cluster of their own (the Makefile's
CLUSTERS, tests/integration/conftest.py): gw0 the first one, gwN one named, addressed and
given an /fsx apart from it, so that two workers never share a container, a network or a
file (no cluster is needed to check that)."""

from __future__ import annotations

import pytest

from integration.cluster import extra_cluster_env, worker_index


@pytest.mark.parametrize(("worker", "index"),
                         [(None, 0), ("gw0", 0), ("gw1", 1), ("gw12", 12), ("master", 0)])
def test_worker_index(monkeypatch: pytest.MonkeyPatch, worker: str | None,
                      index: int) -> None:
    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    assert worker_index() == index


def test_an_extra_cluster_shares_nothing_with_the_first() -> None:
    first = {"SQUALL_CLUSTER": "sqc", "SQUALL_SUBNET": "10.203.56",
             "SQUALL_FSX": "/work/wt/.cluster/fsx"}
    one, two = extra_cluster_env(1, first), extra_cluster_env(2, first)
    assert one == {"SQUALL_CLUSTER": "sqc-w1", "SQUALL_SUBNET": "10.203.60",
                   "SQUALL_FSX": "/work/wt/.cluster/fsx-w1"}
    assert two["SQUALL_SUBNET"] == "10.203.64"
    for key in first:
        assert len({first[key], one[key], two[key]}) == 3, key


def test_the_defaults_are_the_compose_files() -> None:
    env = extra_cluster_env(1, {})
    assert env["SQUALL_CLUSTER"] == "squall-w1"
    assert env["SQUALL_SUBNET"] == "10.203.51"          # docker-compose.yml: 10.203.47
    assert env["SQUALL_FSX"].endswith("/.cluster/fsx-w1")
