"""The Enroot test double's cases that need a Docker engine (they ran in tests/unit, which
must pass without one): the unprivileged user inside a docker container (the host's
/dev/fuse is 0600) and ``enroot import dockerd://`` through the real sqshbuild. The
fixtures and helpers are tests/unit/test_enroot_test_runtime.py's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from gate import missing

UNIT = Path(__file__).resolve().parents[1] / "unit"
if str(UNIT) not in sys.path:
    sys.path.insert(0, str(UNIT))
import test_enroot_test_runtime as rt  # noqa: E402

# The runtime tests' fixtures, registered in this module by name (over the cluster's image).
prerequisites, base_tree, env, image = rt.prerequisites, rt.base_tree, rt.env, rt.image
RUNTIME_DIR, enroot, one_line_error = rt.RUNTIME_DIR, rt.enroot, rt.one_line_error
container_env = rt.container_env
NO_DOCKER = "run the integration tier where Docker Engine runs, as CI does"


def test_import_from_the_docker_daemon_through_sqshbuild(env, base_tree, tmp_path):
    """dockerd:// goes through the real sqshbuild; the image is a tiny `docker import`."""
    if shutil.which("docker") is None or subprocess.run(
            ["docker", "info"], capture_output=True).returncode != 0:
        missing("docker is not available for the import test", NO_DOCKER)
    if shutil.which("sqshbuild") is None:
        missing("sqshbuild is not installed", "pip install -e . (or bash .ci/install-deps.sh)")
    tag = f"squall-rt-test-img:{uuid.uuid4().hex[:8]}"
    tar = subprocess.run(["tar", "-C", str(base_tree), "-c", "."], capture_output=True,
                         check=True).stdout
    subprocess.run(["docker", "import", "-", tag], input=tar, check=True, capture_output=True)
    out_dir = tmp_path / "imported"
    out_dir.mkdir()
    e = dict(env, ENROOT_CACHE_PATH=str(tmp_path / "cache"))
    try:
        r = enroot(e, "import", f"dockerd://{tag}", cwd=out_dir, timeout=300)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    name = tag.replace(":", "+") + ".sqsh"
    assert r.stdout.strip() == name
    assert [p.name for p in out_dir.iterdir()] == [name]      # no temporary, no sidecar
    sb = subprocess.run(["unsquashfs", "-s", str(out_dir / name)], capture_output=True,
                        text=True).stdout
    assert "Compression lzo" in sb and "Data is uncompressed" in sb   # Enroot's format
    started = enroot(e, "start", str(out_dir / name), "cat", "/etc/os-release")
    assert started.stdout.startswith("ID=squalltest")
    again = enroot(e, "import", f"dockerd://{tag}", check=False, cwd=out_dir)
    assert "already exists" in one_line_error(again)


# --- unprivileged user, in a docker container (the host's /dev/fuse is 0600) -------------

UNPRIVILEGED_SCRIPT = r"""
set -eu
chmod 666 /dev/fuse
useradd -u 1000 -m u
cp /work/base.sqsh /home/u/img.sqsh && chown u /home/u/img.sqsh
# Each start in a session of its own, as under slurmstepd (Enroot's fuse-shim is torn down
# by the kernel's orphaned-process-group rule, which needs the reaper, this script as PID 1,
# to be in another session).
AS_U=(setsid setpriv --reuid 1000 --regid 1000 --init-groups env -i HOME=/home/u PATH=/usr/bin:/bin
      ENROOT_SYSCONF_PATH=/nonexistent ENROOT_RUNTIME_PATH=/tmp/rt-u)
run() { "${AS_U[@]}" "$@"; }
E=/rt/bin/enroot
/rt/install.sh >/dev/null   # the node image's way: /opt/enroot-test-runtime, /etc/enroot
echo "INSTALLED=$(setsid setpriv --reuid 1000 --regid 1000 --init-groups env -i HOME=/home/u \
  PATH=/usr/bin:/bin /opt/enroot-test-runtime/bin/enroot start /home/u/img.sqsh \
  cat /etc/os-release \
  | head -n1) $(ls -d /tmp/enroot-runtime-1000)"
# Enroot's mounts.d/20-config.fstab, installed: docker's own bind-mounted hosts/hostname/
# resolv.conf of this container, bound read-only for the user (flags locked by the host).
INST=(setsid setpriv --reuid 1000 --regid 1000 --init-groups env -i HOME=/home/u PATH=/usr/bin:/bin
      /opt/enroot-test-runtime/bin/enroot)
for f in /etc/hosts /etc/hostname /etc/resolv.conf; do
  probe="cat $f; (echo x >>$f) 2>/dev/null && echo RW; true"
  inside=$("${INST[@]}" start /home/u/img.sqsh sh -c "$probe")
  [ "$inside" = "$(cat $f)" ] && echo "HOSTFILE_$f=same" || echo "HOSTFILE_$f=differs"
done
echo "OSREL=$(run $E start /home/u/img.sqsh cat /etc/os-release | head -n1)"
echo "ID=$(run $E start /home/u/img.sqsh id -u)"
CAPS=$(run $E start /home/u/img.sqsh grep -E '^(CapEff|NoNewPrivs)' /proc/self/status)
echo "CAPS=$(echo $CAPS)"
echo "ROOTID=$(run $E start -r /home/u/img.sqsh id -u)"
# As Enroot presents them: the image's files owned by the user (root when remapped), so a
# mount target can be made in a root-owned directory of the image.
echo "OWNER=$(echo $(run $E start /home/u/img.sqsh stat -c %u:%g /etc/os-release /))"
echo "ROOTOWNER=$(run $E start -r /home/u/img.sqsh stat -c %u:%g /etc/os-release)"
echo "NEWTARGET=$(run $E start -m /tmp:/newdir/sub /home/u/img.sqsh ls -d /newdir/sub)"
echo "ROOTCAPS=$(run $E start -r /home/u/img.sqsh grep CapEff /proc/self/status | tr -d '\t')"
ROOTMNT=$(run $E start /home/u/img.sqsh grep ' / / ' /proc/self/mountinfo)
echo "OVERLAY=$(echo "$ROOTMNT" | grep -o ' - [a-z.-]*')"
# A simple command in the background: setpriv, env and enroot exec in place, so $! is the container.
"${AS_U[@]}" $E start /home/u/img.sqsh sh -c 'kill -STOP $$; exit 0' & pid=$!
for i in $(seq 100); do grep -q '^State:.*T (stopped)' /proc/$pid/status && break; sleep 0.05; done
echo "STOPPED=$(grep -c '^State:.*T' /proc/$pid/status)"
echo "DAEMONS_WHILE_STOPPED=$(pgrep -u 1000 -c squashfuse || true)"
# The plugin's join, as the job user: user namespace first, then the mount namespace.
echo "JOINED=$("${AS_U[@]}" nsenter -t $pid -U -m --preserve-credentials cat /etc/os-release \
  | head -n1) $("${AS_U[@]}" cat /proc/$pid/environ | tr '\0' '\n' | grep -c '^PATH=')"
kill -KILL $pid; wait $pid || true
for i in $(seq 100); do pgrep -u 1000 squashfuse >/dev/null || break; sleep 0.05; done
echo "DAEMONS_AFTER=$(pgrep -u 1000 -c squashfuse || true)"
echo "MOUNTS_AFTER=$(grep -c -e img.sqsh -e /tmp/rt-u /proc/mounts || true)"
echo "RUNTIME_LEFT=$(ls -A /tmp/rt-u /tmp/rt-u/.scratch | tr '\n' ' ')"
chmod 600 /dev/fuse
echo "NOFUSE=$(run $E start /home/u/img.sqsh true 2>&1 | tr '\n' '|')"
chmod 666 /dev/fuse
for i in 1 2 3 4 5 6 7; do
  t0=$(date +%s%N); run $E start /home/u/img.sqsh true; t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
done | sort -n | sed -n '4s/^/MEDIAN_MS=/p'

"""


def test_unprivileged_user_in_docker(image):
    if shutil.which("docker") is None or subprocess.run(
            ["docker", "info"], capture_output=True).returncode != 0:
        missing("docker is not available for the unprivileged-user test", NO_DOCKER)
    name = f"squall-rt-test-{uuid.uuid4().hex[:8]}"
    cmd = ["docker", "run", "--rm", "--name", name,
           "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
           "--device", "/dev/fuse", "--security-opt", "seccomp=unconfined",
           "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined",
           "-v", f"{RUNTIME_DIR}:/rt:ro", "-v", f"{image.parent}:/work:ro",
           "squall-base:trixie", "bash", "-c", UNPRIVILEGED_SCRIPT]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    assert r.returncode == 0, r.stderr
    got = container_env(r.stdout)
    assert got["OSREL"] == "ID=squalltest", r.stdout
    assert got["INSTALLED"] == "ID=squalltest /tmp/enroot-runtime-1000"
    for f in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf"):
        assert got[f"HOSTFILE_{f}"] == "same", r.stdout
    assert got["ID"] == "1000" and got["ROOTID"] == "0"
    assert got["OWNER"] == "1000:1000 1000:1000" and got["ROOTOWNER"] == "0:0", r.stdout
    assert got["NEWTARGET"] == "/newdir/sub", r.stdout
    assert got["CAPS"].split() == ["CapEff:", "0000000000000000", "NoNewPrivs:", "1"], got["CAPS"]
    assert got["ROOTCAPS"] != "CapEff:0000000000000000"
    assert got["OVERLAY"] == " - overlay"             # kernel overlayfs works unprivileged
    assert got["STOPPED"] == "1" and got["DAEMONS_WHILE_STOPPED"] == "1", r.stdout
    assert got["JOINED"] == "ID=squalltest 1", r.stdout
    assert got["DAEMONS_AFTER"] == "0" and got["MOUNTS_AFTER"] == "0", r.stdout
    assert got["RUNTIME_LEFT"].split() == ["/tmp/rt-u:", ".scratch", "/tmp/rt-u/.scratch:"]
    assert got["NOFUSE"].startswith("[ERROR] /dev/fuse is not usable by uid 1000")
    assert got["NOFUSE"].count("|") == 1               # one line
    assert int(got["MEDIAN_MS"]) < 500, r.stdout
