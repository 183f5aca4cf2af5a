"""The site policy's scope for local files (issue 41, docs/registries.md "Local files"): the
transport ``squall-sqsh`` of /etc/containers/policy.json, its scopes absolute paths, read as
strictly as the rest of the file, and compiled by ``sqshbuild policy compile`` into the few
lines the plugin reads at each step's start (no Python per step)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild import filepolicy
from squall.sqshbuild.policy import parse

P = Path("/etc/containers/policy.json")
ACCEPT = [{"type": "insecureAcceptAnything"}]
REJECT = [{"type": "reject"}]
KEY = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0K"  # base64, checked but not loaded here


def text(files: dict | None, default: list | None = None) -> bytes:
    doc: dict = {"default": default or ACCEPT, "transports": {"docker": {"": ACCEPT}}}
    if files is not None:
        doc["transports"]["squall-sqsh"] = files
    return json.dumps(doc).encode()


def test_no_squall_sqsh_transport_leaves_files_unjudged() -> None:
    pol = parse(text(None, REJECT), P)
    assert pol.files is None
    assert filepolicy.compile_text(pol, "1:2:3:4") == "squall-policy-sqsh 1\nstamp 1:2:3:4\n"


def test_scopes_compile_to_one_verdict_each() -> None:
    pol = parse(text({"/fsx/images": ACCEPT, "/fsx/home": REJECT,
                      "/fsx/signed": [{"type": "sigstoreSigned", "keyData": KEY}],
                      "/fsx/gpg": [{"type": "signedBy", "keyType": "GPGKeys",
                                    "keyPath": "/nonexistent.gpg"}],
                      "/": ACCEPT, "": REJECT}, REJECT), P)
    got = filepolicy.compile_text(pol, "9:8:7:6").splitlines()
    assert got[:2] == ["squall-policy-sqsh 1", "stamp 9:8:7:6"]
    assert sorted(got[2:]) == sorted([
        "scope accept /fsx/images", "scope reject /fsx/home", "scope signed /fsx/signed",
        "scope signed /fsx/gpg", "scope accept /", "transport reject", "default reject"])


def test_the_first_requirement_that_a_file_cannot_meet_decides() -> None:
    pol = parse(text({"/a": [*ACCEPT, {"type": "reject"}],
                      "/b": [{"type": "sigstoreSigned", "keyData": KEY}, *REJECT]}), P)
    lines = filepolicy.compile_text(pol, "s").splitlines()
    assert "scope reject /a" in lines and "scope signed /b" in lines
    assert "default accept" in lines


def test_a_scope_with_a_space_keeps_it() -> None:
    pol = parse(text({"/fsx/my images": ACCEPT}), P)
    assert "scope accept /fsx/my images" in filepolicy.compile_text(pol, "s").splitlines()


@pytest.mark.parametrize("scope", ["fsx/images", "/fsx/images/", "/fsx//images", "/fsx/./x",
                                   "/fsx/../etc", "/fsx/a\nb", "/fsx/\u0001", ".", "//x"])
def test_a_scope_that_is_not_an_absolute_normalized_path_is_refused(scope: str) -> None:
    with pytest.raises(SquallError) as info:
        parse(text({scope: ACCEPT}), P)
    line = str(info.value)
    assert "\n" not in line and str(P) in line and "transports.squall-sqsh[" in line, line
    assert "absolute" in line


def test_a_bad_requirement_in_a_file_scope_names_its_place() -> None:
    with pytest.raises(SquallError) as info:
        parse(text({"/fsx": [{"type": "owner", "uid": 0}]}), P)
    assert 'transports.squall-sqsh["/fsx"][0]' in str(info.value)


def write_policy(path: Path, body: bytes) -> Path:
    path.write_bytes(body)
    path.chmod(0o644)
    return path


def test_compile_writes_the_stamp_of_the_file_it_read(tmp_path: Path) -> None:
    src = write_policy(tmp_path / "policy.json", text({"/fsx/home": REJECT}))
    out = tmp_path / "run" / "policy-sqsh"
    filepolicy.compile_file(src, out)
    st = os.stat(src)
    lines = out.read_text().splitlines()
    assert lines[1] == f"stamp {st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    assert "scope reject /fsx/home" in lines
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o755
    assert [p.name for p in out.parent.iterdir()] == ["policy-sqsh"]  # nothing left behind


def test_compile_refuses_a_directory_others_may_write(tmp_path: Path) -> None:
    src = write_policy(tmp_path / "policy.json", text(None))
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o777)
    with pytest.raises(SquallError) as info:
        filepolicy.compile_file(src, run / "policy-sqsh")
    assert str(run) in str(info.value) and "others" in str(info.value)


def sqshbuild(*args: str, policy: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SQSHBUILD_POLICY": str(policy)}
    return subprocess.run([sys.executable, "-c", "from squall.sqshbuild.cli import main; main()",
                           *args], env=env, capture_output=True, text=True, check=False)


def test_the_cli_compiles_and_says_one_line_for_a_bad_file(tmp_path: Path) -> None:
    good = write_policy(tmp_path / "good.json", text({"/fsx": ACCEPT}))
    bad = write_policy(tmp_path / "bad.json", text({"fsx": ACCEPT}))
    out = tmp_path / "policy-sqsh"
    ok = sqshbuild("policy", "compile", "--output", str(out), policy=good)
    assert ok.returncode == 0, ok.stderr
    assert "scope accept /fsx" in out.read_text()
    res = sqshbuild("policy", "compile", "--output", str(out), policy=bad)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert str(bad) in res.stderr and "absolute" in res.stderr


def test_compile_without_a_policy_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(SquallError) as info:
        filepolicy.compile_file(tmp_path / "none.json", tmp_path / "out")
    assert "does not exist" in str(info.value)
