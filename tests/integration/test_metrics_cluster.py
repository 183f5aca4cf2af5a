"""squall's metrics on every node through node_exporter's textfile collector (issue 41):
``curl node1:9100/metrics`` from the login node shows them move with a step, and a step
that fails moves a failure counter by its reason."""

from __future__ import annotations

import re
import time

from .cluster import Cluster


def scrape(cluster: Cluster, node: str = "node1") -> dict[str, float]:
    """node's squall_* samples, as node_exporter serves them over HTTP."""
    res = cluster.run(f"curl -sf --max-time 10 http://{node}:9100/metrics")
    samples = {}
    for line in res.out.splitlines():
        m = re.fullmatch(r"(squall_\S+) (\S+)", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


def settled(cluster: Cluster, timeout: float = 60) -> dict[str, float]:
    """node1's samples once they held still for 5 seconds: the steps that ran before (the
    fixtures' too) have all been counted (a step counts at slurmstepd's exit, after its
    container stopped)."""
    deadline = time.monotonic() + timeout
    last, still = scrape(cluster), 0
    while still < 5:
        time.sleep(1)
        now = scrape(cluster)
        same = {k: v for k, v in now.items() if "timestamp" not in k} == \
            {k: v for k, v in last.items() if "timestamp" not in k}
        still = still + 1 if same else 0
        assert time.monotonic() < deadline, "node1's metrics never settled"
        last = now
    return last


def moved(cluster: Cluster, before: dict[str, float], series: str,
          timeout: float = 30) -> dict[str, float]:
    """Scrape until series is above its value in before (the step's end runs in
    slurmstepd's exit, just after srun returns)."""
    deadline = time.monotonic() + timeout
    while True:
        now = scrape(cluster)
        if now.get(series, 0) > before.get(series, 0):
            return now
        assert time.monotonic() < deadline, f"{series} did not move: {now.get(series)}"
        time.sleep(0.5)


def test_a_step_moves_starts_and_phase_histograms(cluster: Cluster, image: str) -> None:
    before = settled(cluster)
    cluster.run(f"srun -N1 -w node1 --container-image={image} true")
    after = moved(cluster, before, 'squall_steps_total{result="ok"}')
    starts = sum(after.get(f'squall_container_starts_total{{source="{s}"}}', 0) -
                 before.get(f'squall_container_starts_total{{source="{s}"}}', 0)
                 for s in ("image", "local_copy", "kept", "joined"))
    assert starts == 1, after
    for phase in ("resolve", "prepare", "start", "join"):
        key = f'squall_phase_seconds_count{{phase="{phase}"}}'
        assert after[key] == before.get(key, 0) + 1, (phase, after)
    assert after["squall_metrics_updated_timestamp_seconds"] > 0
    # the text and the record are root's; node_exporter reads the text, nobody else writes it
    res = cluster.run("stat -c '%U %a' /var/lib/prometheus/node-exporter/squall.prom "
                      "/var/lib/squall/metrics /var/lib/squall/metrics/record",
                      node="node1", user="root")
    assert res.out.split("\n")[:3] == ["root 644", "root 700", "root 600"], res.out


def test_a_failed_step_moves_its_reason(cluster: Cluster) -> None:
    key = 'squall_failures_total{reason="resolve"}'
    before = settled(cluster)
    res = cluster.run("srun -N1 -w node1 --container-image=/fsx/images/no-such-image.sqsh "
                      "true", check=False)
    assert res.rc != 0
    after = moved(cluster, before, key)
    assert after[key] == before.get(key, 0) + 1
    assert after['squall_steps_total{result="failed"}'] == \
        before.get('squall_steps_total{result="failed"}', 0) + 1


def test_steps_at_once_lose_no_count(cluster: Cluster, image: str) -> None:
    key = 'squall_steps_total{result="ok"}'
    before = settled(cluster)
    cluster.run(f"salloc -N1 -w node1 bash -c 'for i in 1 2 3 4; do srun -n1 --overlap "
                f"--container-image={image} true & done; wait'", timeout=300)
    deadline = time.monotonic() + 30
    while scrape(cluster).get(key, 0) < before.get(key, 0) + 4:
        assert time.monotonic() < deadline, "steps' counts were lost"
        time.sleep(0.5)
    assert settled(cluster)[key] == before.get(key, 0) + 4
