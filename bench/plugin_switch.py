"""Benchmarks only: switch the mini cluster between squall's plugstack line and Pyxis's.

NVIDIA Pyxis 0.24.0 is the plugin squall replaces; the benches put it beside squall on the
same nodes, the same Enroot and the same images (issue 44). It is never part of the
product: its release source is pinned in deps/pins.txt and fetched by docker/fetch-dep.py
(upstream, or the mirror SQUALL_DEPS_MIRROR names: ../shared/deps on this project's
machines), built once on the login node against the nodes' own Slurm headers
(libslurm-dev, Slurm 24.11) and installed at PYXIS_SO on every node, the login node
included (srun loads the SPANK plugins too), outside Slurm's PluginDir.

Both plugins register `--container-image`, so a node runs one line at a time:
/etc/slurm/plugstack.conf holds squall's line (kept aside once as SAVED) or PYXIS_LINE.
Neither slurmd nor slurmctld needs a restart or a reconfigure: srun, and slurmstepd for
every step and for the job prolog and epilog, read plugstack.conf each time they start.
The one thing read at slurmd's start is Pyxis's `slurm_spank_slurmd_init`, which makes
its runtime_path: the switch makes /run/pyxis itself. A switch waits until no job runs,
so that no job's epilog runs under the other plugin than its steps did.

    python bench/plugin_switch.py install     # fetch, build, install Pyxis (idempotent)
    python bench/plugin_switch.py pyxis|squall
    python bench/plugin_switch.py show

In a bench: `with using(cluster, "pyxis"): ...` restores squall's line however it ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import LOGIN, NODES, Cluster  # noqa: E402

PYXIS_SO = "/usr/local/lib/pyxis/spank_pyxis.so"
# Pyxis's documented site line (shared/deps/README.md) with use_squashfuse=1: as sites
# that start from a .sqsh on shared storage run it (no `enroot create` per step).
PYXIS_LINE = (f"required {PYXIS_SO} runtime_path=/run/pyxis execute_entrypoint=0 "
              "container_scope=global sbatch_support=1 use_enroot_load=0 use_squashfuse=1")
PLUGSTACK = "/etc/slurm/plugstack.conf"
SAVED = "/etc/slurm/plugstack.conf.squall"  # squall's file as the node image wrote it
STAGE = "/fsx/bench-pyxis"  # the checked tarball and the built plugin, for every node
PLUGINS = ("squall", "pyxis")


class SwitchError(Exception):
    """The switch cannot be made: the message is its one line."""


def all_nodes(cluster: Cluster) -> tuple[str, ...]:
    return (LOGIN, *NODES) if cluster.nodes == NODES else (LOGIN, *cluster.nodes)


def fetch_pyxis() -> Path:
    """Pyxis's release tarball, checked against its pin (docker/fetch-dep.py)."""
    res = subprocess.run([sys.executable, str(ROOT / "docker" / "fetch-dep.py"), "pyxis"],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SwitchError(res.stderr.strip().splitlines()[-1] if res.stderr.strip()
                          else "docker/fetch-dep.py pyxis failed")
    return Path(res.stdout.strip())


def install_pyxis(cluster: Cluster) -> str:
    """Build Pyxis on the login node and install it on every node (again only when the
    tarball changed); returns the plugin's sha256."""
    tarball = fetch_pyxis()
    data = tarball.read_bytes()
    stamp = hashlib.sha256(data).hexdigest()
    cluster.put(f"{STAGE}/pyxis.tar.gz", data, owner=0)
    have = cluster.run(f"cat {STAGE}/built 2>/dev/null", user="root", check=False).out.strip()
    if have != stamp:
        cluster.run(f"set -e; d=$(mktemp -d /tmp/pyxis.XXXXXX); tar -xzf {STAGE}/pyxis.tar.gz"
                    f" -C $d --strip-components=1; make -s -C $d >/dev/null;"
                    f" install -m 0644 $d/spank_pyxis.so {STAGE}/spank_pyxis.so; rm -rf $d;"
                    f" echo {stamp} >{STAGE}/built", user="root", timeout=600)
    for node in all_nodes(cluster):
        cluster.run(f"cmp -s {STAGE}/spank_pyxis.so {PYXIS_SO} || install -D -m 0644 "
                    f"{STAGE}/spank_pyxis.so {PYXIS_SO}", node=node, user="root")
    return cluster.run(f"sha256sum {PYXIS_SO}", user="root").out.split()[0]


def active(cluster: Cluster, node: str = LOGIN) -> str:
    """Which plugin NODE's plugstack.conf loads: squall, pyxis, or what it holds."""
    text = cluster.run(f"grep '^required' {PLUGSTACK}", node=node, user="root",
                       check=False).out
    if "spank_squall.so" in text and "spank_pyxis.so" not in text:
        return "squall"
    if "spank_pyxis.so" in text and "spank_squall.so" not in text:
        return "pyxis"
    return text.strip() or "none"


def wait_idle(cluster: Cluster, timeout: float = 120) -> None:
    """Wait until no job is in the queue (a job's epilog must run under its own plugin)."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = cluster.run("squeue -h -o '%i %T'", user="root", check=False).out.strip()
        if not out:
            return
        time.sleep(0.5)
    raise SwitchError(f"jobs still in the queue after {timeout:.0f} s: "
                      f"{' '.join(out.split())}; cancel them first")


def switch(cluster: Cluster, plugin: str, wait: float = 120, squall_args: str = "") -> None:
    """Make every node (and the login node) load PLUGIN's line; SQUALL_ARGS (KEY=VALUE
    words) replace or add those keys in squall's (a bench's setting, e.g.
    local_cache_max_nodes=2)."""
    if plugin not in PLUGINS:
        raise SwitchError(f"unknown plugin {plugin!r}: use one of {', '.join(PLUGINS)}")
    wait_idle(cluster, wait)
    for node in all_nodes(cluster):
        # squall's file, kept aside once, from a node that still loads squall.
        cluster.run(f"[ -e {SAVED} ] || {{ grep -q spank_squall.so {PLUGSTACK} && "
                    f"cp -p {PLUGSTACK} {SAVED}; }}", node=node, user="root")
        if plugin == "squall":
            cmd = f"cp -p {SAVED} {PLUGSTACK}.new"
            for arg in squall_args.split():  # KEY=VALUE replaces the line's KEY=...
                key = arg.split("=", 1)[0]
                cmd += (f" && sed -i '/^required .*spank_squall.so/{{s| {key}=[^ ]*||;"
                        f"s|$| {arg}|}}' {PLUGSTACK}.new")
        else:
            cmd = (f"test -f {PYXIS_SO} || {{ echo 'Pyxis is not installed at {PYXIS_SO}:"
                   f" run bench/plugin_switch.py install' >&2; exit 1; }}; "
                   "install -d -m 0755 /run/pyxis; "
                   f"printf '%s\\n' '# benchmarks only (bench/plugin_switch.py): Pyxis 0.24.0'"
                   f" '{PYXIS_LINE}' >{PLUGSTACK}.new; chmod 0644 {PLUGSTACK}.new")
        res = cluster.run(f"{cmd} && mv -f {PLUGSTACK}.new {PLUGSTACK}", node=node,
                          user="root", check=False)
        if res.rc != 0:
            raise SwitchError(f"{node}: {res.err.strip() or 'the switch failed'}")
        if active(cluster, node) != plugin:
            raise SwitchError(f"{node}: plugstack.conf does not load {plugin} after the switch")


@contextlib.contextmanager
def using(cluster: Cluster, plugin: str, squall_args: str = "") -> Iterator[None]:
    """Run the block with PLUGIN's line; squall's own is back afterwards, however it ends."""
    try:
        switch(cluster, plugin, squall_args=squall_args)
        yield
    finally:
        cluster.run("scancel -u squall", user="root", check=False)
        switch(cluster, "squall", wait=300)


def cluster_from_env() -> Cluster:
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    if not cluster.healthy():
        raise SwitchError("the mini cluster is not up: run `make cluster-up`")
    return cluster


@click.command()
@click.argument("what", type=click.Choice(["install", "show", *PLUGINS]))
def main(what: str) -> None:
    """Install Pyxis beside squall (benchmarks only), switch the nodes, or show the line."""
    try:
        cluster = cluster_from_env()
        if what == "install":
            click.echo(f"Pyxis installed at {PYXIS_SO} (sha256 {install_pyxis(cluster)})")
        elif what in PLUGINS:
            switch(cluster, what)
        for node in all_nodes(cluster):
            click.echo(f"{node}: {active(cluster, node)}")
    except SwitchError as e:
        raise click.ClickException(str(e)) from None


if __name__ == "__main__":
    main()
