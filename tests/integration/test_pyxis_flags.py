"""Pyxis 0.24 conformance: every srun flag with Pyxis's observable outcome (issue 10).

One test (or a few) per flag, named after it. The expected outcomes come from Pyxis's
documentation and shared/reference/pyxis-compat.md; squall's messages may differ.
"""

from __future__ import annotations

import time

import pytest

from .cluster import Cluster
from .pyxis_helpers import (
    HOME,
    NODE,
    error_lines,
    last_line,
    mounted,
    srun,
    warning_lines,
)

# --- --container-image ---------------------------------------------------------------------

def test_pyxis_container_image_squashfs_path(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image}", "grep ^ID= /etc/os-release")
    assert last_line(res) == "ID=squalltest", res


def test_pyxis_container_image_relative_path(cluster: Cluster, image: str) -> None:
    # A value starting with '.' is a file relative to the job's working directory.
    rel = f"./img-{time.time_ns()}.sqsh"
    cluster.run(f"cp {image} {rel}")
    try:
        res = srun(cluster, f"--container-image={rel}", "grep ^ID= /etc/os-release")
        assert last_line(res) == "ID=squalltest", res
    finally:
        cluster.run(f"rm -f {rel}")


def test_pyxis_container_image_missing_file_fails(cluster: Cluster) -> None:
    res = srun(cluster, "--container-image=/fsx/images/none.sqsh", "true", check=False)
    assert res.rc != 0 and error_lines(res), res


# --- --container-workdir, and the image's WORKDIR (/etc/rc) ---------------------------------

def test_pyxis_container_workdir_default_is_the_image_workdir(cluster: Cluster,
                                                               image: str) -> None:
    # The image's /etc/rc (as `enroot import` writes it) does `cd /work`; without
    # --container-entrypoint Pyxis skips only the entrypoint, so the tasks start there.
    res = srun(cluster, f"--container-image={image}",
               'echo "$(pwd) ran=${SQUALL_ENTRYPOINT_RAN:-no}"')
    assert last_line(res) == "/work ran=no", res
    assert "squall-entrypoint: ran" not in res.out, res


def test_pyxis_container_workdir_relative_command_path(cluster: Cluster, image: str) -> None:
    # `srun --container-image=IMG python train.py`: a relative path resolved in WORKDIR.
    res = srun(cluster, f"--container-image={image} --container-writable",
               "echo 'echo ran-from-workdir' > run.sh && sh ./run.sh")
    assert last_line(res) == "ran-from-workdir", res


def test_pyxis_container_workdir_absolute(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-workdir=/usr/bin", "pwd")
    assert last_line(res) == "/usr/bin", res


def test_pyxis_container_workdir_relative_is_resolved_inside(cluster: Cluster,
                                                             image: str) -> None:
    # Pyxis accepts a relative --container-workdir; "../" from WORKDIR /work is "/".
    res = srun(cluster, f"--container-image={image} --container-workdir=../", "pwd")
    assert last_line(res) == "/", res
    res = srun(cluster, f"--container-image={image} --container-workdir=../etc", "pwd")
    assert last_line(res) == "/etc", res


def test_pyxis_container_workdir_missing_fails(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-workdir=/pyxis", "true",
               check=False)
    assert res.rc != 0, res
    # Pyxis's bats suite (workdir.bats) greps this much of its message.
    assert "/pyxis: No such file or directory" in res.err, res


# --- a registry image that cannot be imported --------------------------------------------

def test_pyxis_container_image_import_failure_is_said_once(cluster: Cluster) -> None:
    # Pyxis's docker_image.bats: two tasks on one node, one import, and one line that
    # scripts grep, "failed to import docker image: IMAGE".
    ref = f"login:5000/squall/none-{time.time_ns()}:missing"
    res = srun(cluster, f"-n2 --container-image={ref}", "true", check=False)
    assert res.rc != 0, res
    assert res.err.count(f"failed to import docker image: {ref}") == 1, res


# --- --[no-]container-entrypoint, --container-entrypoint-log ---------------------------------

def test_pyxis_container_entrypoint_runs_it(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-entrypoint",
               'echo "ran=${SQUALL_ENTRYPOINT_RAN:-no} $(pwd)"')
    assert last_line(res) == "ran=1 /work", res


def test_pyxis_no_container_entrypoint(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --no-container-entrypoint",
               'echo "ran=${SQUALL_ENTRYPOINT_RAN:-no}"')
    assert last_line(res) == "ran=no", res


def test_pyxis_container_entrypoint_log(cluster: Cluster, image: str) -> None:
    quiet = srun(cluster, f"--container-image={image} --container-entrypoint", "true")
    assert "squall-entrypoint: ran" not in quiet.out + quiet.err, quiet
    shown = srun(cluster, f"--container-image={image} --container-entrypoint "
                          "--container-entrypoint-log", "true")
    assert "squall-entrypoint: ran" in shown.out + shown.err, shown


# --- --container-mounts ------------------------------------------------------------------

def test_pyxis_container_mounts_bind_ro_and_short_form(cluster: Cluster, image: str) -> None:
    base = f"{HOME}/mounts-{time.time_ns()}"
    cluster.put(f"{base}/data/file", "from-host\n")
    res = srun(cluster, f"--container-image={image} "
                        f"--container-mounts={base}/data:/mnt/ro:ro,{base}/data",
               f"cat /mnt/ro/file {base}/data/file; touch /mnt/ro/x 2>&1 || true")
    assert res.out.count("from-host") == 2, res
    assert "Read-only file system" in res.out, res


def test_pyxis_container_mounts_regular_file_and_cwd(cluster: Cluster, image: str) -> None:
    marker = f"cwd-marker-{time.time_ns()}"
    cluster.put(f"{HOME}/{marker}", "x\n")
    res = srun(cluster, f"--container-image={image} "
                        "--container-mounts=/etc/hostname:/host-hostname,./:/test-mnt",
               f"cat /host-hostname; ls /test-mnt/{marker} >/dev/null && echo cwd-ok")
    assert NODE in res.out and "cwd-ok" in res.out, res


def test_pyxis_container_mounts_unbindable_ro_flags(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-mounts=/tmp:/mnt/a:unbindable+ro",
               "findmnt -n -o PROPAGATION /mnt/a 2>/dev/null || "
               "awk '$5 == \"/mnt/a\" {print $0}' /proc/self/mountinfo")
    assert "unbindable" in res.out, res


def test_pyxis_container_mounts_path_with_spaces(cluster: Cluster, image: str) -> None:
    # Pyxis separates entries with ',' and fields with ':' only: spaces are part of paths.
    base = f"{HOME}/with space-{time.time_ns()}"
    cluster.put(f"{base}/my data/file", "spaced\n")
    res = srun(cluster, f"--container-image={image} "
                        f"'--container-mounts={base}/my data:/mnt/my data:ro'",
               "cat '/mnt/my data/file'")
    assert last_line(res) == "spaced", res


@pytest.mark.parametrize("options", ["size=16m", "huge=within_size", "nr_inodes=1k+mode=1777",
                                     "size=10%+noexec", "mode=0700+uid=1000+gid=1000"])
def test_pyxis_container_mounts_tmpfs_options_reach_the_kernel(cluster: Cluster, image: str,
                                                               options: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-mounts=tmpfs:/mnt/tmp:{options}",
               "awk '$2 == \"/mnt/tmp\" {print $3, $4}' /proc/mounts")
    fstype, opts = last_line(res).split()
    assert fstype == "tmpfs", res
    first = options.split("+")[0].split("=")[0]
    if first not in ("size", "uid", "gid", "mode"):
        assert first in opts, res


def test_pyxis_container_mounts_target_in_root_owned_directory(cluster: Cluster,
                                                               plain: str) -> None:
    # Enroot creates a missing target inside the image (its files appear owned by the user).
    res = srun(cluster, f"--container-image={plain} --container-mounts=/tmp:/newdir/sub",
               "findmnt -n /newdir/sub >/dev/null && echo mounted")
    assert last_line(res) == "mounted", res


def test_pyxis_container_mounts_missing_source_fails(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-mounts=/nonexistent:/mnt/a",
               "true", check=False)
    # Pyxis's words, which its test suite (and users' scripts) grep
    assert res.rc != 0, res
    assert "--container-mounts: source path does not exist: /nonexistent" in res.err, res


def test_pyxis_container_mounts_path_escape_is_refused(cluster: Cluster, image: str) -> None:
    # Pyxis's mounts.bats: a target that climbs out of the container's root fails with
    # Enroot's "Cross-device link", which the suite greps.
    res = srun(cluster, f"--container-image={image} --container-mounts=/home:../home", "true",
               check=False)
    assert res.rc != 0 and "cross-device link" in res.err.lower(), res


# --- --container-writable / --container-readonly --------------------------------------------

def test_pyxis_container_writable(cluster: Cluster, plain: str) -> None:
    # Not remapped to root: the image's files appear owned by the user (Enroot's squashfuse
    # -o uid=,gid=), so a writable root filesystem is writable by the user.
    res = srun(cluster, f"--container-image={plain} --container-writable",
               "touch /newfile && echo wrote")
    assert last_line(res) == "wrote", res


def test_pyxis_container_readonly(cluster: Cluster, plain: str) -> None:
    res = srun(cluster, f"--container-image={plain} --container-readonly",
               "touch /newfile 2>&1 || true")
    assert "Read-only file system" in res.out, res


# --- --[no-]container-remap-root --------------------------------------------------------------

def test_pyxis_container_remap_root_uid_map(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-remap-root",
               "cat /proc/self/uid_map")
    assert last_line(res).split() == ["0", "1000", "1"], res


def test_pyxis_no_container_remap_root_uid_map(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --no-container-remap-root",
               "cat /proc/self/uid_map")
    assert last_line(res).split() == ["1000", "1000", "1"], res


# --- --[no-]container-mount-home ---------------------------------------------------------------

def test_pyxis_container_mount_home(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-mount-home",
               mounted('"$HOME"') + ' && echo "home=$HOME"')
    assert last_line(res) == f"home={HOME}", res


def test_pyxis_container_mount_home_with_remap_root_is_at_root(cluster: Cluster,
                                                               image: str) -> None:
    # Enroot's home hook: remapped to root, the home is mounted on /root, HOME=/root.
    marker = f"home-marker-{time.time_ns()}"
    cluster.put(f"{HOME}/{marker}", "x\n")
    res = srun(cluster, f"--container-image={image} --container-mount-home --container-remap-root",
               f'echo "HOME=$HOME"; ls /root/{marker}')
    assert res.out.splitlines()[-2:] == ["HOME=/root", f"/root/{marker}"], res


def test_pyxis_no_container_mount_home(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --no-container-mount-home",
               f'ls {HOME}/jobs >/dev/null 2>&1 && echo visible || echo hidden')
    assert last_line(res) == "hidden", res


# --- --container-env --------------------------------------------------------------------------

def test_pyxis_container_env_host_value_wins(cluster: Cluster, image: str) -> None:
    env = {"SQUALL_BOTH_VAR": "host-value"}
    plain = srun(cluster, f"--container-image={image}", "echo $SQUALL_BOTH_VAR", env=env)
    assert last_line(plain) == "image-value", plain
    kept = srun(cluster, f"--container-image={image} --container-env=SQUALL_BOTH_VAR",
                "echo $SQUALL_BOTH_VAR", env=env)
    assert last_line(kept) == "host-value", kept


def test_pyxis_container_env_reaches_the_entrypoint(cluster: Cluster, image: str) -> None:
    # Pyxis puts the --container-env names into the start's environ(): the entrypoint
    # (and Enroot's hooks) see them, not only the tasks.
    ep = f"{HOME}/ep-{time.time_ns()}.sh"
    cluster.put(ep, '#!/bin/sh\necho "entrypoint-saw=$SQUALL_BOTH_VAR" >&2\nexec "$@"\n',
                mode=0o755)
    res = srun(cluster, f"--container-image={image} --container-entrypoint "
                        "--container-entrypoint-log --container-env=SQUALL_BOTH_VAR "
                        f"--container-mounts={ep}:/usr/bin/squall-entrypoint",
               "true", env={"SQUALL_BOTH_VAR": "host-value"})
    assert "entrypoint-saw=host-value" in res.out + res.err, res


def test_pyxis_container_env_lang_dropped_unless_named(cluster: Cluster, image: str) -> None:
    env = {"LANG": "xx_XX.UTF-8", "LC_ALL": "xx_XX.UTF-8", "LANGUAGE": "xx", "LC_TIME": "C"}
    cmd = ('echo "LANG=${LANG-unset} LC_ALL=${LC_ALL-unset} LANGUAGE=${LANGUAGE-unset} '
           'LC_TIME=$LC_TIME"')
    dropped = srun(cluster, f"--container-image={image}", cmd, env=env)
    assert last_line(dropped) == "LANG=unset LC_ALL=unset LANGUAGE=unset LC_TIME=C", dropped
    named = srun(cluster, f"--container-image={image} --container-env=LANG", cmd, env=env)
    assert last_line(named) == "LANG=xx_XX.UTF-8 LC_ALL=unset LANGUAGE=unset LC_TIME=C", named


def test_pyxis_container_env_lang_from_the_image_is_kept(cluster: Cluster) -> None:
    from .images import IMAGE_DIR, IMAGE_ENV, build_image
    img = build_image(cluster, f"{IMAGE_DIR}/lang.sqsh", "squall-lang",
                      env={**IMAGE_ENV, "LANG": "C.UTF-8"})
    res = srun(cluster, f"--container-image={img}", 'echo "LANG=$LANG"', env={"LANG": "xx_XX"})
    assert last_line(res) == "LANG=C.UTF-8", res


# --- --container-save ----------------------------------------------------------------------

def test_pyxis_container_save_relative_path(cluster: Cluster, image: str) -> None:
    name = f"saved-rel-{time.time_ns()}.sqsh"
    res = srun(cluster, f"--container-image={image} --container-remap-root --container-writable "
                        f"--container-save=./{name}", "echo pyxis > /test")
    assert res.rc == 0, res
    # One line on srun's stderr names the file written, as Pyxis says where it exported.
    said = [line for line in res.err.splitlines() if "exported the container" in line]
    assert len(said) == 1 and said[0].endswith(f"/{name}"), res
    assert said[0].startswith("squall: exported the container to /"), res
    again = srun(cluster, f"--container-image=./{name}", "cat /test")
    assert last_line(again) == "pyxis", again
    cluster.run(f"rm -f {name}")


def test_pyxis_container_save_failure_fails_the_step(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} "
                        "--container-save=/nonexistent-dir/saved.sqsh", "true", check=False)
    assert res.rc != 0, res
    assert "/nonexistent-dir/saved.sqsh" in res.err, res


# --- flags without an image ------------------------------------------------------------------

def test_pyxis_flags_without_image_are_ignored_with_a_warning(cluster: Cluster) -> None:
    res = srun(cluster, "--container-mounts=/tmp:/x --container-workdir=/tmp", "pwd")
    assert res.rc == 0 and last_line(res) != "/tmp", res
    assert warning_lines(res) or "ignoring" in res.err, res
