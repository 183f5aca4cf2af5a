"""The site policy's scope for local files, compiled for the plugin: ``sqshbuild policy
compile`` reads the squall-sqsh transport of /etc/containers/policy.json (policy.py, as
strictly as the rest of the file) and writes the few lines spank/core/sqshpolicy.h describes
into /run/squall/policy-sqsh, stamped with the policy file's device, inode, size and mtime,
so that a step started from a ``.sqsh`` file is judged in C, with no Python per step. The
plugin runs it as root whenever the stamp no longer matches the policy file."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from squall.errors import SquallError
from squall.sqshbuild.policy import Policy, Requirement, parse
from squall.sqshbuild.safefs import read_trusted

COMPILED = Path("/run/squall/policy-sqsh")
HEADER = "squall-policy-sqsh 1"
_FILE_LIMIT = 1 << 20


def verdict(reqs: tuple[Requirement, ...]) -> str:
    """What a file meets of a scope: every requirement must pass, and a file carries no
    signature, so the first that is neither accept-anything decides."""
    for req in reqs:
        if req.kind == "reject":
            return "reject"
        if req.kind != "insecureAcceptAnything":
            return "signed"
    return "accept"


def compile_text(pol: Policy, stamp: str) -> str:
    lines = [HEADER, f"stamp {stamp}"]
    if pol.files is not None:
        lines += [f"scope {verdict(reqs)} {scope}" for scope, reqs in sorted(pol.files.items())
                  if scope]
        if "" in pol.files:
            lines.append(f"transport {verdict(pol.files[''])}")
        lines.append(f"default {verdict(pol.default)}")
    return "\n".join(lines) + "\n"


def stamp_of(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise SquallError(f"the site policy {path} does not exist: nothing to compile") \
            from None
    except OSError as exc:
        raise SquallError(f"the site policy {path} cannot be read ({exc.strerror})") from None


def _directory(out: Path) -> None:
    """out's directory, made 0755 when missing; root's (or the caller's) and written by no
    one else, as the plugin trusts what is in it."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(out.parent, 0o755)
        os.chmod(out.parent, 0o755)
    st = os.lstat(out.parent)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()) \
            or st.st_mode & 0o022:
        raise SquallError(f"{out.parent} is not a directory of root's that no others may "
                          f"write (owner uid {st.st_uid}, mode "
                          f"{stat.S_IMODE(st.st_mode):04o}): fix it with chown root "
                          f"{out.parent}; chmod 0755 {out.parent}")


def _write(out: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), 0o644)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def compile_file(source: Path, out: Path = COMPILED) -> str:
    """Compile the policy file source into out, atomically; the text written."""
    before = _stat(source)
    data = read_trusted(source, f"the site policy {source}", _FILE_LIMIT)
    if stamp_of(_stat(source)) != stamp_of(before):
        raise SquallError(f"the site policy {source} changed while it was read: run "
                          "sqshbuild policy compile again")
    text = compile_text(parse(data or b"", source), stamp_of(before))
    _directory(out)
    _write(out, text)
    return text
