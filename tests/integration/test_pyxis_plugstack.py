"""Pyxis 0.24 conformance: plugstack.conf keys (issue 10, item 1).

A Pyxis site's line, with squall's .so in place of Pyxis's, loads unchanged: every Pyxis
0.24 key with Pyxis's meaning and boolean spellings; an unknown key still refuses to load,
naming the key. Each test rewrites the plugin's line on one node (the login node where
srun itself must refuse) and restores it.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from .cluster import Cluster
from .pyxis_helpers import (
    ENROOT,
    HOME,
    NODE,
    PLUGSTACK,
    current_args,
    error_lines,
    last_line,
    plugstack_args,
    srun,
)
from .registry_image import REGISTRY, push


def test_pyxis_plugstack_site_line_loads_unchanged(cluster: Cluster, image: str) -> None:
    # A Pyxis site's arguments: no enroot= (Enroot is found on slurmstepd's PATH, as Pyxis
    # runs it), Pyxis's runtime_path, and Pyxis's keys and boolean spellings.
    # The node has Enroot where a site installs it (on slurmd's PATH).
    cluster.run(f"ln -sfn {ENROOT} /usr/local/bin/enroot", node=NODE, user="root")
    try:
        with plugstack_args(cluster, "runtime_path=/run/pyxis use_squashfuse=1 "
                                     "sbatch_support=true execute_entrypoint=no"):
            res = srun(cluster, f"--container-image={image}", "grep ^ID= /etc/os-release")
            assert last_line(res) == "ID=squalltest", res
            listed = cluster.run("ls -d /run/pyxis/1000", node=NODE, user="root", check=False)
            assert listed.rc == 0, listed
    finally:
        cluster.run("rm -f /usr/local/bin/enroot", node=NODE, user="root")


@pytest.mark.parametrize("value", ["1", "0", "true", "false", "yes", "no", "y", "n"])
def test_pyxis_plugstack_use_squashfuse(cluster: Cluster, image: str, value: str) -> None:
    # squall always starts the image straight from its file: both values work.
    with plugstack_args(cluster, f"{current_args(cluster)} use_squashfuse={value}"):
        res = srun(cluster, f"--container-image={image}", "grep ^ID= /etc/os-release")
        assert last_line(res) == "ID=squalltest", res


@pytest.mark.parametrize(("value", "ran"), [("1", "1"), ("true", "1"), ("y", "1"),
                                            ("no", "no")])
def test_pyxis_plugstack_execute_entrypoint(cluster: Cluster, image: str, value: str,
                                            ran: str) -> None:
    with plugstack_args(cluster, f"{current_args(cluster)} execute_entrypoint={value}"):
        res = srun(cluster, f"--container-image={image}", 'echo "ran=${SQUALL_ENTRYPOINT_RAN:-no}"')
        assert last_line(res) == f"ran={ran}", res
        off = srun(cluster, f"--container-image={image} --no-container-entrypoint",
                   'echo "ran=${SQUALL_ENTRYPOINT_RAN:-no}"')
        assert last_line(off) == "ran=no", off


@pytest.mark.parametrize(("value", "inside"), [("true", True), ("false", False), ("n", False)])
def test_pyxis_plugstack_sbatch_support(cluster: Cluster, image: str, value: str,
                                        inside: bool) -> None:
    out = f"{HOME}/jobs/sbatch-support-{time.time_ns()}.out"
    script = (f"#!/bin/sh\n#SBATCH --container-image={image}\n#SBATCH -N1 -w {NODE} -o {out}\n"
              "grep ^ID= /etc/os-release\n")
    with plugstack_args(cluster, f"{current_args(cluster)} sbatch_support={value}"):
        jobid = cluster.sbatch(script)
        cluster.wait_job(jobid, {"COMPLETED", "FAILED"}, timeout=90)
    text = cluster.run(f"cat {out}").out
    assert ("ID=squalltest" in text) == inside, text


def test_pyxis_plugstack_container_scope_defaults_to_global(cluster: Cluster,
                                                            image: str) -> None:
    name = f"scope{time.time_ns()}"
    args = " ".join(a for a in current_args(cluster).split()
                    if not a.startswith("container_scope="))
    with plugstack_args(cluster, args):
        srun(cluster, f"--container-image={image} --container-name={name}", "true")
    listed = cluster.run("/usr/bin/enroot list", node=NODE).out.split()
    cluster.run(f"/usr/bin/enroot remove -f pyxis_{name}", node=NODE,
                check=False)
    assert f"pyxis_{name}" in listed, listed


def test_pyxis_plugstack_runtime_path(cluster: Cluster, image: str) -> None:
    path = f"/run/pyxis-test-{time.time_ns()}"
    args = " ".join(a for a in current_args(cluster).split() if not a.startswith("runtime_path="))
    with plugstack_args(cluster, f"{args} runtime_path={path}"):
        srun(cluster, f"--container-image={image}", "true")
    st = cluster.run(f"stat -c '%U %a' {path}/1000", node=NODE, user="root")
    assert st.out.split() == ["squall", "700"], st


# --- importer (Pyxis's get/release protocol) ---------------------------------------------------

IMPORTER = r"""#!/bin/bash
# A site importer with Pyxis's protocol: `get URI` prints a squashfs path, `release` cleans up.
set -euo pipefail
log={log}
printf '%s uri=%s rt=%s job=%s step=%s uid=%s ver=%s\n' "$1" "${{2-}}" "${{PYXIS_RUNTIME_PATH-}}" \
    "${{SLURM_JOB_ID-}}" "${{SLURM_STEP_ID-}}" "${{SLURM_JOB_UID-}}" "${{PYXIS_VERSION-}}" >> "$log"
file="${{PYXIS_RUNTIME_PATH}}/${{SLURM_JOB_UID}}/${{SLURM_JOB_ID}}.${{SLURM_STEP_ID}}.squashfs"
case "$1" in
  get)
    if [[ $2 == docker://fail* ]]; then
        echo "importer: cannot pull $2 (registry said no)" >&2; exit 3
    fi
    echo "progress: fetching $2" >&2
    cp {image} "$file"
    echo "$file" ;;
  release) rm -f "$file" ;;
esac
"""


def test_pyxis_plugstack_importer_get_and_release(cluster: Cluster, image: str) -> None:
    tag = time.time_ns()
    log = f"{HOME}/importer-{tag}.log"
    script = f"{HOME}/importer-{tag}.sh"
    cluster.put(script, IMPORTER.format(log=log, image=image), mode=0o755)
    with plugstack_args(cluster, f"{current_args(cluster)} importer={script}"):
        res = srun(cluster, "--container-image=library/ubuntu:24.04", "grep ^ID= /etc/os-release")
        assert last_line(res) == "ID=squalltest", res
        failed = srun(cluster, "--container-image=fail/me:1", "true", check=False)
        # A file image never goes through the importer.
        srun(cluster, f"--container-image={image}", "true")
        # A named container that exists is reused without an import, as with Pyxis.
        named = f"--container-image=library/ubuntu:24.04 --container-name=imp{tag}"
        srun(cluster, named, "true")
        srun(cluster, named, "true")
        cluster.run(f"{ENROOT} remove -f pyxis_imp{tag}", node=NODE)
    assert failed.rc != 0, failed
    assert any("registry said no" in line for line in error_lines(failed)), failed
    calls = cluster.run(f"cat {log}").out.splitlines()
    gets = [c for c in calls if c.startswith("get ")]
    releases = [c for c in calls if c.startswith("release ")]
    assert len(gets) == 3, calls
    assert "uri=docker://library/ubuntu:24.04 rt=/run/squall job=" in gets[0], calls
    assert " uid=1000 " in gets[0] and " step=" in gets[0], calls
    assert len(releases) >= 1, calls
    leftover = cluster.run("ls /run/squall/1000/*.squashfs 2>/dev/null | wc -l", node=NODE,
                           user="root").out.strip()
    assert leftover == "0", "the importer's release was not called at the step's end"


# --- use_enroot_load ----------------------------------------------------------------------

def test_pyxis_plugstack_use_enroot_load(cluster: Cluster, tools: str) -> None:
    """use_enroot_load=1 hands a registry image to `enroot load`, not to sqshbuild.

    Enroot 4.1.2's import cannot pull from the mini cluster's registry (Debian's
    docker-registry 2.8.3): its first request, a HEAD of the tag without an Accept header,
    gets 400 MANIFEST_INVALID (the registry fails to convert the manifest to schema 1),
    where public registries answer 401 or 200. So this checks that Enroot got the image and
    that its own words reach srun in one line, and that the shared cache was not used; the
    pull itself is not verified here."""
    repo = f"test/load-{uuid.uuid4().hex[:8]}"
    # An image of its own: the default one may be in the cache from an earlier test.
    pushed = push(cluster, tools, repo, mark=repo)
    cached = cluster.fsx_host / "squall/images" / f"sha256-{pushed['digest'].split(':')[1]}.sqsh"
    with plugstack_args(cluster, f"{current_args(cluster)} use_enroot_load=1"):
        res = cluster.run(f"SQSHBUILD_INSECURE_REGISTRIES={REGISTRY} srun -N1 -w {NODE} "
                          f"--container-image={REGISTRY}/{repo}:v1 true",
                          timeout=300, check=False)
    lines = [ln for ln in res.err.splitlines() if ln.startswith("squall: error:")]
    assert len(lines) == 1 and lines[0].startswith("squall: error: enroot load failed"), res
    assert f"http://{REGISTRY}/v2/{repo}/manifests/v1" in lines[0], res
    assert not cached.exists(), "use_enroot_load=1 went through sqshbuild's shared cache"


# --- refusals ----------------------------------------------------------------------------

@pytest.mark.parametrize(("arg", "needle"),
                         [("bogus=1", "unknown argument 'bogus=1'"),
                          ("sbatch_support=maybe", "sbatch_support must be a boolean")])
def test_pyxis_plugstack_bad_argument_refuses_to_load(cluster: Cluster, arg: str,
                                                      needle: str) -> None:
    # srun reads the login node's plugstack.conf: the plugin refuses to load there.
    args = current_args(cluster, node="login")
    with plugstack_args(cluster, f"{args} {arg}", nodes=("login",)):
        res = cluster.run(f"srun -N1 -w {NODE} true", check=False)
    assert res.rc != 0, res
    assert needle in res.err, res


def test_plugstack_conf_is_restored(cluster: Cluster) -> None:
    # The tests above restore the file; a leftover would break every later test.
    for node in ("login", NODE):
        text = cluster.run(f"cat {PLUGSTACK}", node=node, user="root").out
        assert "bogus" not in text and "importer=" not in text, json.dumps(text)
