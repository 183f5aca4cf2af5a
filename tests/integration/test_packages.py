"""The node images install squall from its Debian packages, built inside each image against
that image's Slurm (docker/node.Dockerfile): every integration test runs the packaged
install. These tests check that it is the packaged one, and that Debian's Python was
left alone."""

from __future__ import annotations

import os

import pytest

from .cluster import Cluster

SLURM = {"bookworm": "22.05", "trixie": "24.11", "sid": "26.05"}
RELEASE = os.environ.get("SQUALL_RELEASE", "trixie")


def plugin_path(cluster: Cluster, node: str) -> str:
    line = cluster.run("grep -m1 '^required ' /etc/slurm/plugstack.conf", node=node,
                       user="root").out
    return line.split()[1]


@pytest.mark.parametrize("node", ["login", "node1"])
def test_dpkg_owns_the_plugin_the_hook_and_the_tools(cluster: Cluster, node: str) -> None:
    plugin = plugin_path(cluster, node)
    res = cluster.run(f"dpkg -S {plugin} /usr/libexec/squall/squall-efa-hook "
                      "/usr/bin/sqshbuild /usr/bin/mksbatch /usr/bin/squall "
                      "/usr/sbin/squall-healthcheck", node=node, user="root")
    owners = dict(line.split(": ", 1)[::-1] for line in res.out.splitlines())
    assert owners == {plugin: "squall-slurm-plugin",
                      "/usr/libexec/squall/squall-efa-hook": "squall-slurm-plugin",
                      "/usr/bin/sqshbuild": "python3-squall",
                      "/usr/bin/mksbatch": "python3-squall",
                      "/usr/bin/squall": "python3-squall",
                      "/usr/sbin/squall-healthcheck": "python3-squall"}, res
    assert plugin.endswith("/slurm-wlm/spank_squall.so")   # Slurm's PluginDir


def test_plugin_package_requires_this_slurm_release(cluster: Cluster) -> None:
    res = cluster.run("dpkg-query -W -f='${Depends}' squall-slurm-plugin", user="root")
    major, minor = SLURM[RELEASE].split(".")
    assert (f"slurm-wlm-basic-plugins (>= {major}.{minor}), "
            f"slurm-wlm-basic-plugins (<< {major}.{int(minor) + 1:02d})") in res.out, res


def test_the_plugstack_line_is_the_packaged_snippets(cluster: Cluster) -> None:
    snippet = cluster.run("grep '^required ' /usr/share/squall/plugstack.conf.d/squall.conf",
                          node="node1", user="root").out.strip()
    line = cluster.run("grep '^required ' /etc/slurm/plugstack.conf", node="node1",
                       user="root").out.strip()
    assert line.startswith(snippet + " ") and "sqshbuild=/usr/bin/sqshbuild" in snippet
    # shipped, not enabled: nothing in plugstack.conf.d names it
    res = cluster.run("ls /etc/slurm/plugstack.conf.d/", node="node1", user="root")
    assert "squall" not in res.out


def test_debians_python_is_untouched(cluster: Cluster) -> None:
    res = cluster.run("python3 -c 'import squall, squall.core; print(squall.__file__)'; "
                      "ls -d /usr/local/lib/python3*/dist-packages/squall* 2>/dev/null; "
                      "command -v pip pip3 || true", node="node1")
    assert res.out.splitlines() == ["/usr/lib/python3/dist-packages/squall/__init__.py"], res


def test_packaged_commands_and_completion(cluster: Cluster) -> None:
    res = cluster.run("for c in squall sqshbuild mksbatch; do $c --version; done; "
                      "cat /usr/share/bash-completion/completions/squall", node="node1")
    lines = res.out.splitlines()
    assert lines[:3] == ["squall 0.1.0", "sqshbuild 0.1.0", "mksbatch 0.1.0"], res
    assert any("_SQUALL_COMPLETE=bash_complete" in ln for ln in lines), res


def test_slurm_loads_the_packaged_plugin(cluster: Cluster) -> None:
    res = cluster.run("srun --help")
    assert "--container-image" in res.out
    res = cluster.run("srun -N1 -w node1 --container-image=/nonexistent.sqsh true", check=False)
    assert res.rc != 0 and "squall: error:" in res.err, res


def test_python3_squall_made_the_image_builder_the_same_on_every_node(
        cluster: Cluster) -> None:
    """Issue 26: the account /etc/squall/builder names, a system user whose uid is the same
    on every node (one image here), home 0700, no login shell; the file a conffile."""
    seen = set()
    for node in ("login", *cluster.nodes):
        res = cluster.run("getent passwd squall-builder && "
                          "stat -c '%U %G %a' /var/lib/squall-builder && "
                          "grep -v '^#' /etc/squall/builder && "
                          "grep -x /etc/squall/builder /var/lib/dpkg/info/python3-squall.conffiles "
                          "&& dpkg -S /etc/squall/builder", node=node, user="root")
        entry, home, name, conffile, owner = res.out.strip().splitlines()
        _, _, uid, gid, _, homedir, shell = entry.split(":")
        assert int(uid) < 1000 and (homedir, shell) == ("/var/lib/squall-builder",
                                                        "/usr/sbin/nologin"), entry
        assert home == "squall-builder squall-builder 700" and name == "squall-builder"
        assert conffile == "/etc/squall/builder" and owner.startswith("python3-squall"), res
        seen.add((uid, gid))
    assert len(seen) == 1, seen
