"""Bad input reaches the user's terminal as one line naming the cause and the fix (issue 3).

Each case runs a real srun as the test user and asserts the exact text of the one
``squall: error:`` line on srun's stderr, and that the step failed.
"""

from __future__ import annotations

import shlex
import time

from .cluster import Cluster


def error_line(cluster: Cluster, args: str, cmd: str = "true") -> str:
    res = cluster.run(f"srun -N1 -w node2 {args} {cmd}", check=False)
    assert res.rc != 0, f"the step should have failed: {res}"
    lines = [line for line in res.err.splitlines() if line.startswith("squall: error: ")]
    assert len(lines) == 1, f"expected one squall error line: {res}"
    return lines[0][len("squall: error: "):]


def test_missing_image(cluster: Cluster) -> None:
    line = error_line(cluster, "--container-image=/fsx/images/does-not-exist.sqsh")
    assert line.startswith("--container-image=/fsx/images/does-not-exist.sqsh: no such file "
                           "on node2: check the path"), line


def test_unreadable_image(cluster: Cluster, image: str) -> None:
    path = f"/fsx/images/squall-test/private-{time.time_ns()}.sqsh"
    cluster.run(f"cp {image} {path} && chown root:root {path} && chmod 0600 {path}",
                user="root")
    line = error_line(cluster, f"--container-image={path}")
    assert line.startswith(f"--container-image={path}: permission denied for the job user "
                           "on node2"), line


def test_not_a_squashfs(cluster: Cluster) -> None:
    path = f"/fsx/home/squall/not-an-image-{time.time_ns()}.sqsh"
    cluster.put(path, "#!/bin/sh\necho this is a script\n")
    line = error_line(cluster, f"--container-image={path}")
    assert line == (f"--container-image={path}: not a squashfs image (no 'hsqs' magic at the "
                    "start): build one with sqshbuild or mksquashfs"), line


def test_bad_mount_spec(cluster: Cluster, image: str) -> None:
    line = error_line(cluster, f"--container-image={image} --container-mounts=/tmp:relative")
    assert line.startswith("--container-mounts"), line
    assert "relative" in line, line


def test_unknown_name_flag(cluster: Cluster, image: str) -> None:
    line = error_line(cluster, f"--container-image={image} --container-name=foo:bogus")
    assert line.startswith("--container-name"), line
    assert "bogus" in line, line


def test_absolute_mount_source_missing(cluster: Cluster, image: str) -> None:
    line = error_line(cluster, f"--container-image={image} "
                               "--container-mounts=/nonexistent/squall-src:/mnt/a")
    assert "/nonexistent/squall-src" in line, line


def test_start_failure_shows_the_runtime_own_last_lines(cluster: Cluster, image: str) -> None:
    # A directory cannot be mounted over the image's /etc/os-release file.
    line = error_line(cluster, f"--container-image={image} "
                               "--container-mounts=/tmp:/etc/os-release")
    assert line.startswith("container start failed (exit status 1): "), line
    # Enroot's own words (enroot-mount's), not a paraphrase of them.
    assert "enroot-mount: failed to mount" in line and "/etc/os-release" in line, line


def test_runtime_not_found(cluster: Cluster, image: str) -> None:
    # Point node2's plugstack line at a runtime that does not exist, for one step.
    find = "grep -l spank_squall /etc/slurm/plugstack.conf /etc/slurm/plugstack.conf.d/*.conf"
    conf = cluster.run(f"{find} 2>/dev/null | head -n1", node="node2", user="root").out.strip()
    assert conf, "no plugstack line for squall on node2"
    backup = f"/root/plugstack-{time.time_ns()}.bak"
    cluster.run(f"cp -p {conf} {backup} && sed -i 's#enroot=[^ ]*#enroot=/opt/missing/enroot#' "
                f"{shlex.quote(conf)}", node="node2", user="root")
    try:
        line = error_line(cluster, f"--container-image={image}")
    finally:
        cluster.run(f"cp -p {backup} {conf} && rm -f {backup}", node="node2", user="root")
    assert line.startswith("container runtime not found: /opt/missing/enroot is not executable"
                           " on this node"), line
    assert "enroot= in plugstack.conf" in line, line
