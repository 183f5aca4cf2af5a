"""squall's Enroot TEST DOUBLE (tests/enroot_test_runtime), checked point by point against
../shared/reference/enroot-contract.md with real squashfs images, real squashfuse and real
user and mount namespaces. Runs as root on the host, with no Docker engine: the cases that
need one (the unprivileged user, dockerd:// imports) are in
tests/integration/test_enroot_test_runtime_docker.py."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from gate import need_root, need_tool

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_DIR = ROOT / "tests" / "enroot_test_runtime"
ENROOT = RUNTIME_DIR / "bin" / "enroot"
IMAGE_BINARIES = ("sh", "cat", "echo", "env", "ls", "grep", "id", "touch", "mkdir", "sleep", "true",
                  "stat")


@pytest.fixture(scope="module", autouse=True)
def prerequisites() -> None:
    for tool in ("mksquashfs", "unsquashfs"):
        need_tool(tool, "squashfs-tools")
    need_tool("squashfuse", "squashfuse")
    need_tool("fuse-overlayfs", "fuse-overlayfs")
    need_tool("unshare", "util-linux")
    need_tool("setpriv", "util-linux")
    need_tool("perl", "perl-base")
    need_root("these tests run as root on the host (the unprivileged case runs in docker)")


def _copy_with_libs(binary: str, root: Path) -> None:
    path = Path(shutil.which(binary) or pytest.fail(f"{binary} not found"))
    libs = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
    files = [path] + [Path(w) for w in libs.split() if w.startswith("/")]
    for f in files:
        dest = root / f.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            shutil.copy2(f.resolve(), dest)


@pytest.fixture(scope="module")
def base_tree(tmp_path_factory) -> Path:
    """A tiny root filesystem: a few host binaries with their libraries, plus /etc files."""
    root = tmp_path_factory.mktemp("tree") / "rootfs"
    for b in IMAGE_BINARIES:
        _copy_with_libs(b, root)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text("ID=squalltest\nVERSION_ID=1\n")
    (root / "etc/environment").write_text(
        'PATH=/usr/bin:/bin\nFROM_IMAGE="image"\nBAR=image\nBAZ=image\nQUX=image\n'
        "HOSTREF=${SQUALL_T_HOSTVAL}\n  SPACED='single'  \nexport EXPORTED=1\n# comment\n"
        "NODEFAULT=${SQUALL_T_UNSET:-x}\n")
    return root


def make_image(tree: Path, dest: Path, **extra: str) -> Path:
    """Squash a copy of TREE with EXTRA files (path relative to / -> content)."""
    work = dest.with_suffix(".tree")
    shutil.copytree(tree, work, symlinks=True)
    for rel, content in extra.items():
        f = work / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content)
    subprocess.run(["mksquashfs", str(work), str(dest), "-noappend", "-quiet", "-no-progress",
                    "-comp", "lzo", "-noD"], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(work)
    return dest


@pytest.fixture()
def image(base_tree, tmp_path) -> Path:
    return make_image(base_tree, tmp_path / "base.sqsh")


@pytest.fixture()
def env(tmp_path) -> dict[str, str]:
    """A private Enroot configuration: sysconf, user config, data, runtime and temp dirs."""
    sysconf = tmp_path / "sysconf"
    for d in ("environ.d", "mounts.d", "hooks.d"):
        (sysconf / d).mkdir(parents=True)
    (sysconf / "enroot.conf").write_text("ENROOT_DATA_PATH ${SQUALL_T_BASE}/data\n")
    (tmp_path / "temp").mkdir()
    e = {k: v for k, v in os.environ.items() if not k.startswith("ENROOT_")}
    e.update(SQUALL_T_BASE=str(tmp_path), ENROOT_SYSCONF_PATH=str(sysconf),
             ENROOT_CONFIG_PATH=str(tmp_path / "userconf"),
             ENROOT_RUNTIME_PATH=str(tmp_path / "runtime"), ENROOT_TEMP_PATH=str(tmp_path / "temp"))
    return e


def enroot(env: dict[str, str], *args: str, check: bool = True, timeout: float = 60,
           cwd: Path | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([str(ENROOT), *args], env=env, capture_output=True, text=True,
                       timeout=timeout, cwd=cwd)
    if check and r.returncode != 0:
        pytest.fail(f"enroot {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def container_env(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def processes_mentioning(text: str) -> list[str]:
    """Live (non-zombie) processes whose command line mentions TEXT."""
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z" and p.name != str(os.getpid()):
            found.append(f"{p.name}: {cmdline}")
    return found


def wait_until_clean(image: Path, runtime: Path, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        procs = processes_mentioning(str(image))
        mounts = [m for m in Path("/proc/mounts").read_text().splitlines()
                  if str(image) in m or str(runtime) in m]
        if not procs and not mounts:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"left behind after exit: processes {procs}, mounts {mounts}")
        time.sleep(0.05)
    assert_runtime_dir_clean(runtime)


def assert_runtime_dir_clean(runtime: Path) -> None:
    """Only the empty mount point of the per-container tmpfs may stay in the runtime dir."""
    if runtime.exists():
        assert [p.name for p in runtime.iterdir()] == [".scratch"], list(runtime.iterdir())
        assert not any((runtime / ".scratch").iterdir()), "files left in the runtime dir"


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line error, got: {r.stderr!r}"
    assert lines[0].startswith("[ERROR] ")
    return lines[0]


# --- start: root filesystem, process identity -------------------------------------------

def test_version_says_it_is_the_test_double(env):
    out = enroot(env, "version").stdout
    assert out.startswith("4.1.") and "squall test double" in out and "not NVIDIA Enroot" in out


def test_start_prints_a_file_of_the_image(env, image):
    r = enroot(env, "start", str(image), "cat", "/etc/os-release")
    assert r.stdout == "ID=squalltest\nVERSION_ID=1\n"
    assert r.stderr == ""


def test_container_main_process_is_the_enroot_start_process(env, image):
    p = subprocess.Popen([str(ENROOT), "start", str(image), "sh", "-c", "echo $$"], env=env,
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and int(out) == p.pid


def test_relative_image_path_and_login_shell_when_no_command(env, image):
    r = subprocess.run([str(ENROOT), "start", image.name], env=env, cwd=image.parent,
                       input="cat /etc/os-release\n", capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "ID=squalltest" in r.stdout


# --- environment -------------------------------------------------------------------------

def test_environment_precedence_image_environd_conf_cli(env, image, tmp_path):
    sysconf = Path(env["ENROOT_SYSCONF_PATH"])
    (sysconf / "environ.d/10-site.env").write_text("BAR=environd\nBAZ=environd\nQUX=environd\n")
    conf = tmp_path / "c.conf"
    conf.write_text("environ() {\n  echo BAZ=conf\n  echo QUX=conf\n  echo ENROOT_SECRET=x\n}\n")
    env = dict(env, SQUALL_T_HOSTVAL="from-host", SQUALL_T_PASS="passed")
    r = enroot(env, "start", "--conf", str(conf), "-e", "QUX=cli", "-e", "SQUALL_T_PASS",
               "-e", "SQUALL_T_UNSET_ONE", str(image), "env")
    got = container_env(r.stdout)
    assert got["FROM_IMAGE"] == "image"          # quotes of /etc/environment removed
    assert got["BAR"] == "environd"              # environ.d over the image
    assert got["BAZ"] == "conf"                  # conf environ() over environ.d
    assert got["QUX"] == "cli"                   # -e over everything
    assert got["HOSTREF"] == "from-host"         # ${VAR} substituted from the host
    assert got["NODEFAULT"] == "${SQUALL_T_UNSET:-x}"   # only ${VAR}, as Enroot's envsubst
    assert got["SPACED"] == "single"             # Enroot's envfmt: blanks and quotes go
    assert "EXPORTED" not in got and "export EXPORTED" not in got   # not KEY=VALUE: dropped
    assert got["SQUALL_T_PASS"] == "passed"      # -e KEY takes the host value
    assert got["SQUALL_T_UNSET_ONE"] == ""       # -e KEY unset on the host: empty, as Enroot
    assert "SQUALL_T_BASE" not in got            # the host environment does not leak
    assert not [k for k in got if k.startswith("ENROOT_")]


# --- mounts and the root filesystem ------------------------------------------------------

def test_mount_bind_rw_ro_and_tmpfs(env, image, tmp_path):
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir(), ro.mkdir()
    (ro / "f").write_text("ro-data\n")
    script = ("cat /data/ro/f; echo new > /data/rw/new && echo RW-OK;"
              " echo x > /data/ro/x 2>/dev/null || echo RO-REFUSED;"
              " grep ' /scratch ' /proc/self/mountinfo | grep -q tmpfs && echo TMPFS-OK;"
              " echo t > /scratch/t && echo TMPFS-WRITABLE")
    r = enroot(env, "start", "-m", f"{rw}:/data/rw", "-m", f"{ro}:/data/ro:none:ro",
               "--mount", "tmpfs:/scratch:tmpfs", str(image), "sh", "-c", script)
    assert r.stdout.split() == ["ro-data", "RW-OK", "RO-REFUSED", "TMPFS-OK", "TMPFS-WRITABLE"]
    assert (rw / "new").read_text() == "new\n" and not (ro / "x").exists()


def test_binds_from_mounts_with_locked_flags(env, image, tmp_path):
    """In the user namespace the host's mount flags are locked: a ro bind from a noexec,
    noatime tmpfs must keep them (util-linux 2.38's mount(8) fails there)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,nosuid,nodev,noatime", "locked",
                    str(locked)], check=True)
    try:
        (locked / "d").mkdir()
        (locked / "d/f").write_text("data\n")
        r = enroot(env, "start", "-m", f"{locked}/d:/d:none:ro,rprivate", str(image), "sh", "-c",
                   "cat /d/f; touch /d/x 2>/dev/null || echo RO; grep ' /d ' /proc/self/mountinfo")
        lines = r.stdout.splitlines()
        assert lines[:2] == ["data", "RO"]
        assert lines[2].split()[5] == "ro,nosuid,nodev,noexec,noatime"
        bad = enroot(env, "start", "-m", f"{locked}/d:/d:none:ro,bogus", str(image), "true",
                     check=False)
        assert "unsupported option 'bogus'" in one_line_error(bad)
        e = dict(env, ENROOT_DATA_PATH=str(locked / "data"))
        enroot(e, "create", "-n", "onnoexec", str(image))
        line = one_line_error(enroot(e, "start", "onnoexec", "true", check=False))
        assert "is on a noexec mount" in line
    finally:
        subprocess.run(["umount", "-l", str(locked)], check=True)


def test_every_bind_flag_the_plugin_core_accepts(env, image, tmp_path):
    """spank/core/mounts.c passes these through to fstab lines: all must be understood."""
    src = tmp_path / "src"
    src.mkdir()
    flags = ("ro,rw,private,rprivate,slave,rslave,shared,rshared,unbindable,runbindable,nosuid,"
             "suid,nodev,dev,noexec,exec,noatime,atime,nodiratime,diratime,relatime,norelatime,"
             "strictatime,nostrictatime").split(",")
    for flag in flags:
        conf = tmp_path / f"{flag}.conf"
        conf.write_text(f"mounts() {{\n  echo '{src} /m none x-create=auto,rbind,{flag}'\n}}\n")
        r = enroot(env, "start", "-c", str(conf), str(image), "ls", "-d", "/m", check=False)
        assert r.returncode == 0 and r.stdout == "/m\n", (flag, r.stderr)


def test_root_is_read_only_unless_rw(env, image):
    touch = ["sh", "-c", "touch /newfile 2>/dev/null && echo WROTE || echo READONLY"]
    assert enroot(env, "start", str(image), *touch).stdout.strip() == "READONLY"
    assert enroot(env, "start", "--rw", str(image), *touch).stdout.strip() == "WROTE"
    assert enroot(env, "start", "-w", str(image), *touch).stdout.strip() == "WROTE"
    # Enroot booleans: only no/n/N/No/f/false/FALSE are off; "0" means on.
    on = dict(env, ENROOT_ROOTFS_WRITABLE="0")
    assert enroot(on, "start", str(image), *touch).stdout.strip() == "WROTE"
    off = dict(env, ENROOT_ROOTFS_WRITABLE="false")
    assert enroot(off, "start", str(image), *touch).stdout.strip() == "READONLY"


@pytest.mark.parametrize("off", ["no", "n", "N", "No", "NO", "f", "F", "false", "False", "FALSE"])
def test_every_false_spelling_is_off(env, image, off):
    touch = ["sh", "-c", "touch /newfile 2>/dev/null && echo WROTE || echo READONLY"]
    r = enroot(dict(env, ENROOT_ROOTFS_WRITABLE=off), "start", str(image), *touch)
    assert r.stdout.strip() == "READONLY"


def test_enroot_conf_forms_and_conf_file_directives(env, image, tmp_path):
    sysconf = Path(env["ENROOT_SYSCONF_PATH"])
    (sysconf / "enroot.conf").write_text(
        "# comment\nENROOT_DATA_PATH=${SQUALL_T_BASE}/data-eq\nENROOT_ROOTFS_WRITABLE yes\n"
        "NOT_AN_ENROOT_SETTING leaked\n")
    touch = ["sh", "-c", "touch /newfile 2>/dev/null && echo WROTE || echo READONLY; "
             "echo ${NOT_AN_ENROOT_SETTING:-absent}"]
    assert enroot(env, "start", str(image), *touch).stdout.split() == ["WROTE", "absent"]
    # the environment wins over enroot.conf
    e = dict(env, ENROOT_ROOTFS_WRITABLE="no")
    assert enroot(e, "start", str(image), *touch).stdout.split() == ["READONLY", "absent"]
    # "#ENROOT_..." lines of a --conf file win over both
    conf = tmp_path / "c.conf"
    conf.write_text("#ENROOT_ROOTFS_WRITABLE=y\n# ENROOT_RESTRICT_DEV y\n")
    r = enroot(e, "start", "-c", str(conf), str(image), "sh", "-c",
               "touch /newfile && echo WROTE; ls /dev/fuse 2>/dev/null || echo NO-FUSE")
    assert r.stdout.split() == ["WROTE", "NO-FUSE"]
    enroot(env, "create", "-n", "c", str(image))
    assert (tmp_path / "data-eq" / "c").is_dir()


def test_writes_vanish_at_exit(env, image):
    enroot(env, "start", "--rw", str(image), "sh", "-c", "echo gone > /etc/marker")
    r = enroot(env, "start", str(image), "sh", "-c", "cat /etc/marker 2>/dev/null || echo ABSENT")
    assert r.stdout.strip() == "ABSENT"
    assert_runtime_dir_clean(Path(env["ENROOT_RUNTIME_PATH"]))


def test_image_fstab_and_sysconf_mounts_d_with_x_create(env, base_tree, tmp_path):
    hostdir = tmp_path / "hostdir"
    hostdir.mkdir()
    (hostdir / "h").write_text("host-file\n")
    img = make_image(base_tree, tmp_path / "fstab.sqsh", **{
        "etc/fstab": "# comment\ntmpfs /fromfstab tmpfs x-create=dir,mode=0755\n"
                     "${SQUALL_T_DIR} /hostv none x-create=dir,bind,ro\n"})
    (Path(env["ENROOT_SYSCONF_PATH"]) / "mounts.d/10-site.fstab").write_text(
        f"{hostdir}/h /etc/site-file none x-create=file,bind\n")
    e = dict(env, SQUALL_T_DIR=str(hostdir))
    r = enroot(e, "start", str(img), "sh", "-c",
               "grep -c ' /fromfstab ' /proc/self/mountinfo; cat /hostv/h /etc/site-file")
    assert r.stdout.split("\n")[:3] == ["1", "host-file", "host-file"]


def test_hook_mounts_moved_and_detached(env, image, tmp_path):
    """x-move moves a mount a hook made; x-detach removes one (here the host's /sys)."""
    conf = tmp_path / "c.conf"
    conf.write_text(
        "hooks() {\n"
        '  mkdir -p "$ENROOT_ROOTFS/made-by-hook"\n'
        '  mount -t tmpfs hooktmp "$ENROOT_ROOTFS/made-by-hook"\n'
        '  echo hi > "$ENROOT_ROOTFS/made-by-hook/f"\n'
        '  echo "$ENROOT_ROOTFS/made-by-hook /moved none x-move,x-create=dir" >> "$ENROOT_MOUNTS"\n'
        '  echo "none /sys none x-detach" >> "$ENROOT_MOUNTS"\n'
        "}\n")
    r = enroot(env, "start", "-c", str(conf), str(image), "sh", "-c",
               "cat /moved/f; ls /made-by-hook | grep -c . ; ls /sys | grep -c . ; true")
    assert r.stdout.split() == ["hi", "0", "0"], r.stderr


def test_dev_proc_sys_from_host_unless_restrict_dev(env, image):
    probe = ["sh", "-c", "ls /proc/self/ns/mnt /sys/kernel >/dev/null && echo PROC-SYS;"
             " ls /dev/fuse >/dev/null 2>&1 && echo FUSE || echo NO-FUSE; ls /dev/null"]
    assert enroot(env, "start", str(image), *probe).stdout.split() == [
        "PROC-SYS", "FUSE", "/dev/null"]
    restricted = dict(env, ENROOT_RESTRICT_DEV="y")
    assert enroot(restricted, "start", str(image), *probe).stdout.split() == [
        "PROC-SYS", "NO-FUSE", "/dev/null"]


# --- conf file, hooks, rc ----------------------------------------------------------------

def test_conf_hooks_see_rootfs_and_queue_env_and_mounts(env, image, tmp_path):
    hostdir = tmp_path / "queued"
    hostdir.mkdir()
    (hostdir / "q").write_text("queued-mount\n")
    sysconf = Path(env["ENROOT_SYSCONF_PATH"])
    sys_hook = sysconf / "hooks.d/10-site.sh"
    sys_hook.write_text("#!/bin/sh\necho SYSHOOK=ran >> \"$ENROOT_ENVIRON\"\n")
    # hooks.d runs first: the conf's hooks() sees what it wrote and overrides it.
    sys_hook.chmod(0o755)
    (sysconf / "hooks.d/20-not-executable.sh").write_text("#!/bin/sh\nexit 1\n")
    conf = tmp_path / "c.conf"
    conf.write_text(
        "hooks() {\n"
        '  [ "$ENROOT_PID" -gt 1 ]\n'
        '  SYSHOOK_SEEN=$(grep -c SYSHOOK=ran "$ENROOT_ENVIRON")\n'
        '  . "$ENROOT_ROOTFS/etc/os-release"\n'
        '  printf "HOOK_SAW=%s\\nSYSHOOK=%s\\n" "$ID" "conf-after-$SYSHOOK_SEEN"'
        ' >> "$ENROOT_ENVIRON"\n'
        f'  echo "{hostdir} /queued none x-create=dir,bind" >> "$ENROOT_MOUNTS"\n'
        "}\n"
        "mounts() {\n"
        f'  echo "{hostdir}/q /from-conf none x-create=file,bind"\n'
        "}\n")
    r = enroot(env, "start", "-c", str(conf), str(image), "sh", "-c",
               "echo HOOK_SAW=$HOOK_SAW; cat /queued/q /from-conf; echo SYSHOOK=$SYSHOOK")
    assert r.stdout.split("\n")[:4] == [
        "HOOK_SAW=squalltest", "queued-mount", "queued-mount", "SYSHOOK=conf-after-1"], r.stdout


def test_conf_file_kept_in_the_runtime_dir_stays_readable(env, image):
    """A caller (the plugin) may keep its --conf file in ENROOT_RUNTIME_PATH."""
    runtime = Path(env["ENROOT_RUNTIME_PATH"])
    runtime.mkdir()
    conf = runtime / "step.conf"
    conf.write_text("environ() {\n  echo FROM_RUNTIME_DIR=yes\n}\n")
    r = enroot(env, "start", "-c", str(conf), str(image), "sh", "-c", "echo $FROM_RUNTIME_DIR")
    assert r.stdout == "yes\n"


def test_broken_conf_file_aborts_the_start(env, image, tmp_path):
    conf = tmp_path / "broken.conf"
    conf.write_text("environ() {\n  echo A=$UNSET_IN_CONF\n}\n")
    r = enroot(env, "start", "-c", str(conf), str(image), "true", check=False)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1].startswith(f"[ERROR] The --conf file {conf} failed")
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def test_hooks_see_the_cli_environment_and_their_stdout_is_discarded(env, image, tmp_path):
    """Enroot writes -e into ENROOT_ENVIRON before the hooks run (the EFA hook reads
    SQUALL_EFA from it); a hook's stdout does not reach the caller."""
    conf = tmp_path / "c.conf"
    conf.write_text("hooks() {\n  echo 'hook stdout'\n"
                    '  grep -q "^MODE=require$" "$ENROOT_ENVIRON" &&'
                    ' echo SAW_MODE=1 >> "$ENROOT_ENVIRON"\n'
                    "  true\n}\n")
    r = enroot(env, "start", "-c", str(conf), "-e", "MODE=require", str(image), "sh", "-c",
               "echo $SAW_MODE")
    assert r.stdout == "1\n"


def test_failing_hook_aborts_the_start_with_its_message(env, image, tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("hooks() {\n  echo 'efa-hook: no EFA device on this node' >&2\n  return 4\n}\n")
    marker = tmp_path / "ran"
    r = enroot(env, "start", "--conf", str(conf), "-m", f"{tmp_path}:/t", str(image),
               "touch", "/t/ran", check=False)
    assert r.returncode != 0 and not marker.exists()
    assert "efa-hook: no EFA device on this node" in r.stderr
    assert "[ERROR] Hook hooks() of" in r.stderr.strip().splitlines()[-1]
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def test_etc_rc_runs_with_the_arguments_and_rc_options_replace_it(env, base_tree, tmp_path):
    img = make_image(base_tree, tmp_path / "rc.sqsh",
                     **{"etc/rc": 'echo "image rc: $*"\nexec "$@"\n'})
    assert enroot(env, "start", str(img), "echo", "hi", "there").stdout == \
        "image rc: echo hi there\nhi there\n"
    rcfile = tmp_path / "rc"
    rcfile.write_text('echo "option rc: $#"\n')
    assert enroot(env, "start", "--rc", str(rcfile), str(img), "a", "b").stdout == "option rc: 2\n"
    conf = tmp_path / "c.conf"
    # As in Enroot, the body of rc() is the script: it runs, it is not printed.
    conf.write_text('rc() {\n  echo "conf rc: $1"\n}\n')
    assert enroot(env, "start", "-c", str(conf), str(img), "x").stdout == "conf rc: x\n"
    # On a created container an --rc leaves nothing behind in its directory.
    enroot(env, "create", "-n", "norc", str(img))
    (Path(env["SQUALL_T_BASE"]) / "data/norc/etc/rc").unlink()
    assert enroot(env, "start", "--rc", str(rcfile), "norc", "a").stdout == "option rc: 1\n"
    assert not (Path(env["SQUALL_T_BASE"]) / "data/norc/etc/rc").exists()
    assert enroot(env, "start", "norc", "echo", "plain").stdout == "plain\n"


# --- lifetime: the plugin's stop/join/kill pattern ---------------------------------------

def test_sigkill_while_stopped_leaves_no_mount_and_no_daemon(env, image):
    p = subprocess.Popen([str(ENROOT), "start", str(image), "sh", "-c", "kill -STOP $$; exit 0"],
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        _, status = os.waitpid(p.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), f"container exited instead of stopping: {p.stderr.read()}"
        own_ns = os.readlink("/proc/self/ns/mnt")
        assert os.readlink(f"/proc/{p.pid}/ns/mnt") != own_ns
        for ns in ("user", "cgroup"):
            assert os.readlink(f"/proc/{p.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
        assert Path(f"/proc/{p.pid}/root/etc/os-release").read_text().startswith("ID=squalltest")
        # Joining the mount namespace lands in the container root (pivot_root, not chroot).
        joined = subprocess.run(["nsenter", "-t", str(p.pid), "-U", "-m",
                                 "--preserve-credentials", "cat", "/etc/os-release"],
                                capture_output=True, text=True, timeout=10)
        assert joined.stdout.startswith("ID=squalltest"), joined.stderr
        time.sleep(0.3)  # the daemon must stay while the main process is stopped
        assert processes_mentioning(str(image)), "squashfuse died while the container was stopped"
        environ = Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0")
        assert b"PATH=/usr/bin:/bin" in environ
        os.kill(p.pid, signal.SIGKILL)
        os.waitpid(p.pid, 0)
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close(), p.stderr.close()
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))
    assert not any(Path(env["ENROOT_TEMP_PATH"]).iterdir())


@pytest.mark.parametrize("native", ["yes", "no"])
def test_signal_to_the_process_group_spares_the_fuse_daemons(env, image, native):
    """Ctrl-C at an interactive container shell signals its process group: the root
    filesystem must survive it."""
    e = dict(env, ENROOT_NATIVE_OVERLAYFS=native)
    script = 'trap "" INT TERM; kill -INT 0; kill -TERM 0; sleep 0.3; cat /etc/os-release'
    r = subprocess.run([str(ENROOT), "start", str(image), "sh", "-c", script], env=e,
                       capture_output=True, text=True, timeout=60, start_new_session=True)
    assert r.stdout.startswith("ID=squalltest"), r.stderr
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def test_fuse_overlayfs_fallback_when_native_overlay_is_off(env, image):
    e = dict(env, ENROOT_NATIVE_OVERLAYFS="no")
    r = enroot(e, "start", "--rw", str(image), "sh", "-c",
               "grep -c ' / / .* fuse.fuse-overlayfs ' /proc/self/mountinfo; touch /x && echo OK")
    assert r.stdout.split() == ["1", "OK"]
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def test_two_containers_at_once_each_see_their_own_image(env, base_tree, tmp_path):
    one = make_image(base_tree, tmp_path / "one.sqsh", **{"etc/which": "one\n"})
    two = make_image(base_tree, tmp_path / "two.sqsh", **{"etc/which": "two\n"})
    procs = [subprocess.Popen([str(ENROOT), "start", str(img), "sh", "-c", "kill -STOP $$"],
                              env=env) for img in (one, two)]
    try:
        for p in procs:
            _, status = os.waitpid(p.pid, os.WUNTRACED)
            assert os.WIFSTOPPED(status)
        seen = [Path(f"/proc/{p.pid}/root/etc/which").read_text() for p in procs]
        assert seen == ["one\n", "two\n"]
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            os.waitpid(p.pid, 0)
    wait_until_clean(one, Path(env["ENROOT_RUNTIME_PATH"]))
    wait_until_clean(two, Path(env["ENROOT_RUNTIME_PATH"]))


def test_superuser_without_user_namespace_when_allowed(env, image):
    def user_ns_of_started(e):
        p = subprocess.Popen([str(ENROOT), "start", str(image), "sh", "-c", "kill -STOP $$"],
                             env=e)
        try:
            _, status = os.waitpid(p.pid, os.WUNTRACED)
            assert os.WIFSTOPPED(status)
            assert Path(f"/proc/{p.pid}/root/etc/os-release").read_text().startswith("ID=squall")
            return os.readlink(f"/proc/{p.pid}/ns/user")
        finally:
            os.kill(p.pid, signal.SIGKILL)
            os.waitpid(p.pid, 0)

    own = os.readlink("/proc/self/ns/user")
    assert user_ns_of_started(dict(env, ENROOT_ALLOW_SUPERUSER="y")) == own
    assert user_ns_of_started(env) != own
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def standard_hooks(env: dict[str, str]) -> Path:
    """Install the double's copies of Enroot's standard hooks into the private sysconf."""
    hooks = Path(env["ENROOT_SYSCONF_PATH"]) / "hooks.d"
    for hook in (RUNTIME_DIR / "hooks.d").glob("*.sh"):
        shutil.copy2(hook, hooks / hook.name)
    return hooks


def test_mount_home_is_the_standard_hook_s_business(env, image, tmp_path):
    home = tmp_path / "with space home"
    home.mkdir()
    (home / "dotfile").write_text("mine\n")
    e = dict(env, HOME=str(home), ENROOT_MOUNT_HOME="yes")
    # As Enroot: without its hooks.d/10-home.sh nothing mounts the home.
    r = enroot(e, "start", str(image), "sh", "-c", f"cat '{home}/dotfile' 2>/dev/null || echo NO")
    assert r.stdout == "NO\n"
    standard_hooks(env)
    r = enroot(e, "start", str(image), "sh", "-c", 'echo "$HOME"; cat "$HOME/dotfile"')
    assert r.stdout == f"{home}\nmine\n"
    r = enroot(dict(e, ENROOT_MOUNT_HOME="no"), "start", str(image), "sh", "-c",
               f"cat '{home}/dotfile' 2>/dev/null || echo NOT-MOUNTED")
    assert r.stdout == "NOT-MOUNTED\n"


@pytest.mark.parametrize("how", [("-r",), ()])
def test_mount_home_under_remap_root_is_at_root(env, image, tmp_path, how):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dotfile").write_text("mine\n")
    standard_hooks(env)
    e = dict(env, HOME=str(home), ENROOT_MOUNT_HOME="y")
    if not how:
        e["ENROOT_REMAP_ROOT"] = "yes"
    r = enroot(e, "start", *how, str(image), "sh", "-c", 'echo "$HOME"; cat /root/dotfile')
    assert r.stdout == "/root\nmine\n"


def test_aptfix_hook_under_remap_root_in_debian_images(env, base_tree, tmp_path):
    image = make_image(base_tree, tmp_path / "deb.sqsh", **{"etc/debian_version": "13.0\n"})
    standard_hooks(env)
    cmd = ("sh", "-c", "cat /etc/apt/apt.conf.d/enroot 2>/dev/null || echo none")
    assert enroot(env, "start", "-r", str(image), *cmd).stdout == 'APT::Sandbox::User "root";\n'
    assert enroot(env, "start", str(image), *cmd).stdout in ("none\n",
                                                            'APT::Sandbox::User "root";\n')
    other = make_image(base_tree, tmp_path / "other.sqsh")
    assert enroot(env, "start", "-r", str(other), *cmd).stdout == "none\n"


def test_shadow_hook_adds_the_user_and_drops_apt(env, base_tree, tmp_path):
    image = make_image(base_tree, tmp_path / "pw.sqsh", **{
        "etc/passwd": "_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\n",
        "etc/group": "_apt:x:42:\n", "etc/debian_version": "13.0\n"})
    standard_hooks(env)
    me = pwd.getpwuid(os.getuid()).pw_name
    r = enroot(dict(env, USER=me), "start", "-w", str(image), "cat", "/etc/passwd",
               "/etc/group")
    names = [line.split(":")[0] for line in r.stdout.splitlines()]
    assert "_apt" not in names and "root" in names and "nobody" in names, r.stdout


def test_nofail_mount_of_a_missing_source_is_skipped(env, image, tmp_path):
    conf = tmp_path / "c.conf"
    line = f"{tmp_path}/missing /m none x-create=dir,bind,nofail"
    conf.write_text(f"mounts() {{\n  echo '{line}'\n}}\n")
    r = enroot(env, "start", "-c", str(conf), str(image), "sh", "-c", "echo ok")
    assert r.stdout == "ok\n"


def test_fstab_targets_with_spaces(env, image, tmp_path):
    src = tmp_path / "my data"
    src.mkdir()
    (src / "f").write_text("spaced\n")
    conf = tmp_path / "c.conf"
    esc = str(src).replace(" ", "\\040")
    conf.write_text(f"mounts() {{\n  echo '{esc} /mnt/my\\040data none x-create=dir,rbind'\n}}\n")
    r = enroot(env, "start", "-c", str(conf), str(image), "cat", "/mnt/my data/f")
    assert r.stdout == "spaced\n"


def test_load_rejects_bad_input(env):
    assert "exactly one URI" in one_line_error(enroot(env, "load", check=False))
    assert "Bad URI" in one_line_error(enroot(env, "load", "-n", "x", "debian:12", check=False))


# --- named containers --------------------------------------------------------------------

def test_create_list_start_export_remove_round_trip(env, image, tmp_path):
    assert enroot(env, "create", "-n", "c1", str(image)).stdout.strip() == "c1"
    again = enroot(env, "create", "-n", "c1", str(image), check=False)
    assert "already exists" in one_line_error(again)
    enroot(env, "create", "-f", "-n", "c1", str(image))
    assert enroot(env, "list").stdout.split() == ["c1"]
    (tmp_path / "c1").mkdir()   # a directory of the same name in the cwd does not matter
    r = enroot(env, "start", "c1", "cat", "/etc/os-release", cwd=tmp_path)
    assert r.stdout.startswith("ID=squalltest")
    enroot(env, "start", "--rw", "c1", "sh", "-c", "echo kept > /etc/persist")
    assert (Path(env["SQUALL_T_BASE"]) / "data/c1/etc/persist").read_text() == "kept\n"

    p = subprocess.Popen([str(ENROOT), "start", "c1", "sh", "-c", "kill -STOP $$"], env=env)
    os.waitpid(p.pid, os.WUNTRACED)
    try:
        listing = enroot(env, "list", "-f").stdout
        assert listing.splitlines()[1].split()[:3] == ["c1", str(p.pid), "sh"], listing
        assert "is running" in one_line_error(enroot(env, "remove", "-f", "c1", check=False))
    finally:
        os.kill(p.pid, signal.SIGKILL)
        os.waitpid(p.pid, 0)

    out = tmp_path / "out" / "c1.sqsh"
    out.parent.mkdir()
    assert enroot(env, "export", "-o", str(out), "c1").stdout.strip() == str(out)
    listing = subprocess.run(["unsquashfs", "-l", str(out)], capture_output=True, text=True).stdout
    assert "squashfs-root/etc/persist" in listing
    again = enroot(env, "export", "-o", str(out), "c1", check=False)
    assert "already exists" in one_line_error(again)
    enroot(env, "export", "-f", "-o", str(out), "c1")
    assert [f.name for f in out.parent.iterdir()] == ["c1.sqsh"]   # no temporary left
    assert "add -f" in one_line_error(enroot(env, "remove", "c1", check=False))
    enroot(env, "remove", "-f", "c1")
    assert enroot(env, "list").stdout == ""
    assert enroot(env, "start", str(out), "cat", "/etc/persist").stdout == "kept\n"


def test_create_default_name_and_bad_names(env, image):
    assert enroot(env, "create", str(image)).stdout.strip() == "base"
    assert "Bad container name" in one_line_error(
        enroot(env, "create", "-n", "a/b", str(image), check=False))
    enroot(env, "remove", "-f", "base")


# --- errors ------------------------------------------------------------------------------

def test_not_a_squashfs_is_a_one_line_error(env, tmp_path):
    junk = tmp_path / "junk.sqsh"
    junk.write_bytes(b"this is not a squashfs image\n" * 100)
    line = one_line_error(enroot(env, "start", str(junk), "true", check=False))
    assert "Not a squashfs image" in line and str(junk) in line


@pytest.mark.parametrize("args, words", [
    (["/nonexistent/img.sqsh", "true"], "No such image file: /nonexistent/img.sqsh"),
    (["nosuchname", "true"], "No such container: nosuchname"),
    (["-m", "/nonexistent-src:/x", "IMAGE", "true"],
     "Mount source does not exist: /nonexistent-src"),
    (["-m", "justonefield", "IMAGE", "true"], "Bad --mount 'justonefield'"),
    (["-m", "/a b:/c", "IMAGE", "true"], "Bad --mount '/a b:/c'"),
    (["-m", "/tmp:/../../etc", "IMAGE", "true"], "'..' may not appear"),
    (["-e", "1BAD=x", "IMAGE", "true"], "Bad --env '1BAD=x'"),
    (["-e", "K=two\nlines", "IMAGE", "true"], "Bad --env 'K': the value holds a newline"),
    (["--bogus", "IMAGE"], "Unknown option for enroot start: '--bogus'"),
    (["--conf", "/nonexistent.conf", "IMAGE"], "Cannot read the --conf file /nonexistent.conf"),
    ([], "needs a container NAME or an IMAGE"),
])
def test_bad_start_input_is_a_one_line_error(env, image, args, words):
    args = [str(image) if a == "IMAGE" else a for a in args]
    line = one_line_error(enroot(env, "start", *args, check=False))
    assert words in line
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def test_import_needs_sqshbuild_and_a_docker_uri(env, tmp_path):
    tmp_path = tmp_path / "cwd"
    tmp_path.mkdir()
    no_sqshbuild = dict(env, PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    line = one_line_error(enroot(no_sqshbuild, "import", "docker://debian:12", check=False,
                                 cwd=tmp_path))
    assert "sqshbuild is not installed" in line
    assert "Bad URI" in one_line_error(enroot(env, "import", "debian:12", check=False))
    assert list(tmp_path.iterdir()) == []


def test_other_commands_reject_bad_input(env):
    assert "Unknown command" in one_line_error(enroot(env, "frobnicate", check=False))
    assert "Unsupported URI scheme" in one_line_error(
        enroot(env, "import", "podman://x", check=False))
    assert "No such container" in one_line_error(enroot(env, "export", "nope", check=False))


def test_install_sh_installs_a_working_runtime(image, tmp_path):
    prefix, sysconf = tmp_path / "opt", tmp_path / "etc-enroot"
    subprocess.run([str(RUNTIME_DIR / "install.sh"), str(prefix), str(sysconf)], check=True,
                   capture_output=True)
    assert sorted(p.name for p in sysconf.iterdir()) == [
        "enroot.conf", "environ.d", "hooks.d", "mounts.d"]
    assert sorted(p.name for p in (sysconf / "hooks.d").iterdir()) == [
        "10-aptfix.sh", "10-home.sh", "10-shadow.sh", "50-slurm-pmi.sh"]
    # Enroot's default mounts.d/20-config.fstab (the host's name-resolution files).
    assert [p.name for p in (sysconf / "mounts.d").iterdir()] == ["20-config.fstab"]
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ENROOT_", "XDG_"))}
    e["ENROOT_SYSCONF_PATH"] = str(sysconf)
    link = tmp_path / "enroot-link"   # e.g. /usr/local/bin/enroot -> the installed one
    link.symlink_to(prefix / "bin/enroot")
    runtime = Path(f"/tmp/enroot-runtime-{os.geteuid()}")   # from the installed enroot.conf
    existed = runtime.exists()
    try:
        r = subprocess.run([str(link), "start", str(image), "cat", "/etc/os-release",
                            "/etc/hosts"], env=e, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("ID=squalltest"), r.stderr
        assert r.stdout.endswith("\n" + Path("/etc/hosts").read_text()), r.stdout
        assert_runtime_dir_clean(runtime)
        assert runtime.is_dir()
    finally:
        if not existed:
            shutil.rmtree(runtime, ignore_errors=True)


# --- speed -------------------------------------------------------------------------------

def test_start_true_stays_near_real_enroot(env, image):
    """Real `enroot start image.sqsh true` costs ~0.17 s; the double must stay in that range."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        enroot(env, "start", str(image), "true")
        times.append(time.perf_counter() - t0)
    assert statistics.median(times) < 0.5, times
