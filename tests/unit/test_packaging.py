"""The packaging agrees with itself: one version everywhere, the build dependencies are
installed where the packages are built, the packaged plugstack snippet is a line the
plugin accepts, and the Slurm dependency is computed from the headers compiled against.
(The packages themselves are built by `make packages` and installed in the node images:
tests/integration/test_packages.py.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import squall
from squall.core import parse_plugstack_args

REPO = Path(__file__).resolve().parents[2]


def package_list(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def build_depends() -> set[str]:
    control = (REPO / "debian" / "control").read_text()
    field = re.search(r"^Build-Depends:(.*?)^\S", control, re.M | re.S)
    assert field is not None
    names = {re.split(r"[\s(]", dep.strip())[0] for dep in field.group(1).split(",")}
    # dpkg-buildpackage also needs build-essential, which Build-Depends never lists
    return {"debhelper" if n == "debhelper-compat" else n for n in names if n} | {
        "build-essential"}


def test_one_version_everywhere():
    changelog = (REPO / "debian" / "changelog").read_text().splitlines()[0]
    m = re.match(r"squall \(([^)-]+)-\d+\)", changelog)
    assert m and m.group(1) == squall.__version__
    spec = (REPO / "packaging" / "squall.spec").read_text()
    assert re.search(r"^Version:\s+(\S+)$", spec, re.M).group(1) == squall.__version__
    assert 'dynamic = ["version"]' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("where", [".ci/apt-packages.txt", "docker/node-packages.txt"])
def test_build_depends_are_installed_where_packages_are_built(where):
    missing = build_depends() - package_list(REPO / where)
    assert not missing, f"{where} lacks Build-Depends {sorted(missing)}"


def test_no_pip_into_debians_python_in_the_node_image():
    dockerfile = (REPO / "docker" / "node.Dockerfile").read_text()
    assert "--break-system-packages" not in dockerfile and "pip install" not in dockerfile
    assert "packaging/build-debs.sh" in dockerfile and "dpkg -i" in dockerfile


@pytest.mark.parametrize("plugin,bindir", [
    ("/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_squall.so", "/usr/bin"),
    ("/usr/lib64/slurm/spank_squall.so", "/usr/bin"),
])
def test_snippet_is_a_line_the_plugin_accepts(plugin, bindir):
    text = (REPO / "packaging" / "squall.conf.in").read_text()
    text = text.replace("@PLUGIN@", plugin).replace("@BINDIR@", bindir)
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == 1, "one plugstack line, everything else comments"
    kind, path, *args = lines[0].split()
    assert (kind, path) == ("required", plugin)
    assert parse_plugstack_args(args)["sqshbuild"] == f"{bindir}/sqshbuild"


def slurm_version(tmp_path: Path, number: str | None) -> subprocess.CompletedProcess[str]:
    if number is not None:
        (tmp_path / "slurm").mkdir()
        (tmp_path / "slurm" / "slurm_version.h").write_text(
            f"#ifndef _SLURM_VERSION_H_\n#define SLURM_VERSION_NUMBER {number}\n")
    return subprocess.run(["bash", str(REPO / "packaging" / "slurm-version.sh"),
                           str(tmp_path)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("number,expect", [("0x160508", "22.05 22.06"),
                                           ("0x180b05", "24.11 24.12"),
                                           ("0x1a0500", "26.05 26.06")])
def test_slurm_dependency_from_the_headers(tmp_path, number, expect):
    proc = slurm_version(tmp_path, number)
    assert (proc.returncode, proc.stdout.strip()) == (0, expect)


def test_slurm_dependency_without_headers_is_one_line(tmp_path):
    proc = slurm_version(tmp_path, None)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "install the Slurm headers" in proc.stderr


# -- the image builder account (issue 26, docs/security.md) ------------------------------
BUILDER_CONF = REPO / "packaging" / "builder"
POSTINST = REPO / "debian" / "python3-squall.postinst"


def first_word(text: str) -> str:
    lines = [ln.split()[0] for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return lines[0] if lines else ""


def test_the_builder_file_names_squall_builder_and_says_the_uid_must_match():
    text = BUILDER_CONF.read_text()
    assert first_word(text) == "squall-builder"
    comments = " ".join(ln for ln in text.splitlines() if ln.startswith("#"))
    assert "every node" in comments and "uid" in comments, comments


def test_python3_squall_owns_the_builder_file_as_a_conffile():
    rules = (REPO / "debian" / "rules").read_text()
    assert re.search(r"install -D -m 0644 packaging/builder \$\(PY_PKG\)/etc/squall/builder",
                     rules), "debian/rules must install packaging/builder into python3-squall"
    spec = (REPO / "packaging" / "squall.spec").read_text()
    files = spec.split("%files -n python%{python3_pkgversion}-squall", 1)[1].split("%changelog")[0]
    assert "%config(noreplace) %{_sysconfdir}/squall/builder" in files
    assert "%dir %attr(0700,squall-builder,squall-builder) %{_localstatedir}/lib/squall-builder" \
        in files
    control = (REPO / "debian" / "control").read_text()
    py = control.split("Package: python3-squall", 1)[1]
    depends = re.search(r"^Depends:(.*?)^\S", py, re.M | re.S)
    assert depends and re.search(r"\badduser\b", depends.group(1)), "postinst runs adduser"
    # the plugin reads the same file; python3-squall (its sqshbuild) is what it runs as
    # the builder, so the plugin package names that package, which owns the file
    plugin = control.split("Package: squall-slurm-plugin", 1)[1].split("Package:")[0]
    assert "python3-squall (= ${binary:Version})" in plugin


def stubs(tmp_path: Path, existing: str = "") -> tuple[dict[str, str], Path]:
    """PATH with getent, adduser, install, chown recording their arguments; ``existing``:
    a passwd line getent knows."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls"
    for name in ("adduser", "install", "chown", "useradd", "groupadd"):
        (bin_ / name).write_text(f'#!/bin/sh\necho "{name} $*" >>{log}\n')
    (bin_ / "getent").write_text(
        f'#!/bin/sh\necho "getent $*" >>{log}\n'
        f'[ "$1" = passwd ] && [ "$2" = "{existing.split(":")[0]}" ] && '
        f'echo "{existing}" && exit 0\nexit 2\n')
    for p in bin_.iterdir():
        p.chmod(0o755)
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "DPKG_ROOT": str(tmp_path / "root")}
    return env, log


def run_postinst(tmp_path: Path, conf: str | None, existing: str = "") -> list[str]:
    env, log = stubs(tmp_path, existing)
    if conf is not None:
        etc = tmp_path / "root" / "etc" / "squall"
        etc.mkdir(parents=True)
        (etc / "builder").write_text(conf)
    proc = subprocess.run(["sh", str(POSTINST), "configure", ""], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc
    return log.read_text().splitlines() if log.exists() else []


def test_postinst_creates_the_system_account_and_its_0700_home(tmp_path):
    calls = run_postinst(tmp_path, BUILDER_CONF.read_text())
    add = [c for c in calls if c.startswith("adduser ")]
    assert len(add) == 1, calls
    args = add[0].split()
    for want in ("--system", "--group", "--no-create-home"):
        assert want in args, add
    assert args[args.index("--home") + 1] == "/var/lib/squall-builder"
    assert args[args.index("--shell") + 1] == "/usr/sbin/nologin"
    assert args[-1] == "squall-builder"
    home = [c for c in calls if c.startswith("install ")]
    assert home == [f"install -d -m 0700 -o squall-builder -g squall-builder "
                    f"{tmp_path}/root/var/lib/squall-builder"], calls


def test_postinst_keeps_an_account_the_site_made(tmp_path):
    home = tmp_path / "root" / "var" / "lib" / "squall-builder"
    home.mkdir(parents=True)
    calls = run_postinst(tmp_path, "squall-builder\n",
                         existing="squall-builder:x:990:990::/var/lib/squall-builder:"
                                  "/usr/sbin/nologin")
    assert not [c for c in calls if c.split()[0] in ("adduser", "install", "chown")], calls


@pytest.mark.parametrize("conf", ["none\n", "# site account\nbuilder7 # LDAP\n"])
def test_postinst_creates_nothing_when_the_site_names_none_or_its_own(tmp_path, conf):
    calls = run_postinst(tmp_path, conf)
    assert not [c for c in calls if c.split()[0] in ("adduser", "install")], calls


def spec_pre(spec: str) -> str:
    m = re.search(r"^%pre -n python%\{python3_pkgversion\}-squall\n(.*?)^%", spec, re.M | re.S)
    assert m, "the spec has no %pre for python3-squall"
    return m.group(1)


def test_spec_pre_adds_the_system_user_and_group_once(tmp_path):
    spec = (REPO / "packaging" / "squall.spec").read_text()
    assert re.search(r"^Requires\(pre\):\s+shadow-utils$", spec, re.M)
    script = spec_pre(spec).replace("%{_localstatedir}", "/var") \
        .replace("%{_sbindir}", "/usr/sbin")
    env, log = stubs(tmp_path)
    proc = subprocess.run(["sh", "-e", "-c", script], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc
    calls = log.read_text().splitlines()
    assert [c for c in calls if c.startswith("groupadd")] == ["groupadd -r squall-builder"]
    user = [c for c in calls if c.startswith("useradd")]
    assert user == ["useradd -r -g squall-builder -d /var/lib/squall-builder "
                    "-s /usr/sbin/nologin -c squall image builder squall-builder"], calls


def test_the_rpm_owns_every_python_package_setuptools_installs():
    """rpmbuild refuses installed files no %files line names: a new top-level package
    (squall_steps) must be listed, or `make packages` fails on every RPM system."""
    found = {p.parent.name for p in (REPO / "python").glob("*/__init__.py")}
    assert found >= {"squall", "squall_steps"}
    spec = (REPO / "packaging" / "squall.spec").read_text()
    files = spec.split("%files -n python%{python3_pkgversion}-squall", 1)[1].split("%changelog")[0]
    listed = set(re.findall(r"^%\{squall_sitearch\}/(\w+)/$", files, re.M))
    assert listed == found, f"packaging/squall.spec %files: add {sorted(found - listed)}"


def dockerignore_keeps(path: str) -> bool:
    """Whether the node image's build context holds PATH under .dockerignore's simple
    patterns (a name or directory, and `!` exceptions; the last match wins)."""
    kept = True
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!")
        if path == pattern or path.startswith(pattern.rstrip("/") + "/"):
            kept = negate
    return kept


def test_the_node_image_context_holds_every_file_the_packages_install():
    """.dockerignore leaves tests and docs out of the node image's build so that a change
    to them keeps the package build cached; a file the packages install must stay in."""
    named = set()
    for packaging in ("debian/rules", "packaging/squall.spec"):
        text = "\n".join(line for line in (REPO / packaging).read_text().splitlines()
                         if not line.lstrip().startswith("#"))
        named |= set(re.findall(r"(?<![\w/{}])((?:docs|enroot|packaging|docker)/[\w./-]+\w)", text))
        named |= set(re.findall(r"(?<![\w/])(README\.md|LICENSE)\b", text))
    assert {"docs/plugin.md", "docs/install-rhel.md", "README.md"} <= named
    left_out = sorted(p for p in named if not dockerignore_keeps(p))
    assert not left_out, f".dockerignore leaves out what a package installs: {left_out}"
    for unpackaged in ("tests/unit/test_packaging.py", "bench/bench_scale.py", "docs/admin.md"):
        assert not dockerignore_keeps(unpackaged)
