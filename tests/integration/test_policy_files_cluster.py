"""The site policy's scope for local files on the cluster (issue 41, docs/registries.md
"Local files"): root installs /etc/containers/policy.json with a squall-sqsh transport on
the nodes; a .sqsh file in an accepted directory runs, one in a rejected directory is
refused in one line naming the scope (and counted as a policy refusal), a changed policy
applies at the next step, and a policy without the transport judges no file. The global
default stays insecureAcceptAnything, so registry images are never refused here."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import time
from collections.abc import Callable, Iterator

import pytest

from .cluster import NODES, Cluster

POLICY = "/etc/containers/policy.json"
ACCEPT = [{"type": "insecureAcceptAnything"}]
REJECT = [{"type": "reject"}]
HOME_COPY = "/fsx/home/squall/policy-files/x.sqsh"

Install = Callable[[dict[str, object] | None], None]


def write_policy(cluster: Cluster, node: str, text: str | None) -> None:
    if text is None:
        cluster.run(f"rm -f {POLICY}", node=node, user="root")
        return
    cluster.run(f"mkdir -p /etc/containers && printf '%s' {shlex.quote(text)} > {POLICY}.new "
                f"&& chmod 0644 {POLICY}.new && mv -f {POLICY}.new {POLICY}",
                node=node, user="root")


@pytest.fixture
def policy(cluster: Cluster) -> Iterator[Install]:
    """Install a policy document on every node (None: no file); the nodes' own file, or
    none, comes back at the end."""
    saved = {}
    for node in NODES:
        res = cluster.run(f"cat {POLICY}", node=node, user="root", check=False)
        saved[node] = res.out if res.rc == 0 else None

    def install(doc: dict[str, object] | None) -> None:
        for node in NODES:
            write_policy(cluster, node, None if doc is None else json.dumps(doc))

    yield install
    for node, text in saved.items():
        write_policy(cluster, node, text)


@pytest.fixture
def home_copy(cluster: Cluster, image: str) -> str:
    cluster.run(f"mkdir -p {posixpath.dirname(HOME_COPY)} && cp -f {image} {HOME_COPY}")
    return HOME_COPY


def files_policy(scopes: dict[str, list[dict[str, str]]]) -> dict[str, object]:
    return {"default": ACCEPT,
            "transports": {"docker": {"": ACCEPT}, "squall-sqsh": scopes}}


def step(cluster: Cluster, image: str) -> tuple[int, str]:
    res = cluster.run(f"srun -N1 -w node1 --container-image={image} echo ran-ok", check=False)
    return res.rc, res.out + res.err


def refusals(cluster: Cluster) -> float:
    res = cluster.run("curl -sf --max-time 10 http://node1:9100/metrics", check=False)
    m = re.search(r"^squall_policy_refusals_total (\S+)$", res.out, re.M)
    return float(m.group(1)) if m else 0.0


def test_an_accepted_directory_runs_and_a_rejected_one_is_refused(
        cluster: Cluster, image: str, home_copy: str, policy: Install) -> None:
    policy(files_policy({posixpath.dirname(image): ACCEPT, "/fsx/home": REJECT,
                         "": REJECT}))
    rc, out = step(cluster, image)
    assert rc == 0 and "ran-ok" in out, out
    before = refusals(cluster)
    rc, out = step(cluster, home_copy)
    assert rc != 0 and "ran-ok" not in out, out
    lines = [ln for ln in out.splitlines() if "refuses" in ln]
    assert len(lines) == 1, out
    assert (f"the site policy {POLICY} refuses {home_copy}: the scope \"/fsx/home\" of "
            "transport squall-sqsh rejects every image") in lines[0], out
    deadline = time.monotonic() + 30
    while refusals(cluster) <= before:
        assert time.monotonic() < deadline, "squall_policy_refusals_total did not move"
        time.sleep(0.5)
    res = cluster.run("stat -c '%U %a' /run/squall/policy-sqsh", node="node1", user="root")
    assert res.out.strip() == "root 644", res.out


def test_a_changed_policy_applies_at_the_next_step(
        cluster: Cluster, image: str, home_copy: str, policy: Install) -> None:
    policy(files_policy({"/fsx/home": REJECT}))
    assert step(cluster, home_copy)[0] != 0
    policy(files_policy({"/fsx/home": REJECT, "/fsx/home/squall/policy-files": ACCEPT}))
    rc, out = step(cluster, home_copy)
    assert rc == 0 and "ran-ok" in out, out
    policy(files_policy({"/fsx": [{"type": "sigstoreSigned", "keyData": "eA=="}]}))
    rc, out = step(cluster, image)
    assert rc != 0 and "carries no signature" in out, out


def test_a_link_is_judged_by_the_file_it_leads_to(
        cluster: Cluster, home_copy: str, policy: Install) -> None:
    ok = posixpath.join(posixpath.dirname(home_copy), "ok")
    link = f"{ok}/link.sqsh"
    cluster.run(f"mkdir -p {ok} && ln -sfn ../x.sqsh {link}")
    policy(files_policy({"/fsx/home": REJECT, ok: ACCEPT}))
    rc, out = step(cluster, link)
    assert rc != 0, out
    assert f"refuses {link} (really {home_copy}): the scope \"/fsx/home\"" in out, out


def test_a_file_anyone_may_write_or_replace_under_an_accepted_scope_is_refused(
        cluster: Cluster, home_copy: str, policy: Install) -> None:
    top = posixpath.dirname(home_copy)
    shared = f"{top}/shared"
    cluster.run(f"mkdir -p {shared} && cp -f {home_copy} {shared}/y.sqsh && "
                f"chmod 1777 {shared} && chmod 0644 {shared}/y.sqsh")
    policy(files_policy({top: ACCEPT, "": REJECT}))
    rc, out = step(cluster, f"{shared}/y.sqsh")
    assert rc != 0, out
    assert (f"refuses {shared}/y.sqsh: the scope \"{top}\" of transport squall-sqsh accepts "
            f"it, but {shared} may be written by anyone (mode 1777)") in out, out
    cluster.run(f"chmod 0755 {shared} && chmod 0666 {shared}/y.sqsh")
    rc, out = step(cluster, f"{shared}/y.sqsh")
    assert rc != 0 and f"but {shared}/y.sqsh may be written by anyone (mode 0666)" in out, out
    cluster.run(f"chmod 0644 {shared}/y.sqsh")
    rc, out = step(cluster, f"{shared}/y.sqsh")
    assert rc == 0 and "ran-ok" in out, out


def test_without_the_transport_or_the_file_every_file_runs(
        cluster: Cluster, home_copy: str, policy: Install) -> None:
    policy({"default": ACCEPT, "transports": {"docker": {"login:5000/nothing-here": REJECT}}})
    rc, out = step(cluster, home_copy)
    assert rc == 0 and "ran-ok" in out, out
    policy(None)
    rc, out = step(cluster, home_copy)
    assert rc == 0 and "ran-ok" in out, out


def test_a_policy_that_cannot_be_read_refuses_in_one_line(
        cluster: Cluster, image: str, policy: Install) -> None:
    policy(files_policy({"fsx/images": ACCEPT}))
    rc, out = step(cluster, image)
    assert rc != 0, out
    assert "Traceback" not in out
    assert f"the site policy {POLICY} cannot be used" in out and "absolute" in out, out
