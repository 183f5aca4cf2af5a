"""docker/fetch-dep.py, the one step that gets each release squall builds from source (Enroot):
from a file named by SQUALL_<NAME>_TARBALL, from its cache, from the mirror directory named by
SQUALL_DEPS_MIRROR, or from its upstream address, always checked against the sha256 of the
uncompressed tar stream pinned in deps/pins.txt, written atomically, and with one line on
stderr that says which source it used or why none worked. The upstream here is a local HTTP
server on 127.0.0.1 serving a small tar made by the test, with its own pins file."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FETCH = REPO / "docker" / "fetch-dep.py"
PINS = REPO / "deps" / "pins.txt"
NAME, VERSION = "demo", "1.0"
FILE = f"{NAME}-{VERSION}.tar.gz"


def make_tar(text: str, *, level: int = 9, mtime: int = 0) -> tuple[bytes, str]:
    """A gzipped tar of one file under demo-1.0/, and the sha256 of its uncompressed stream."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = text.encode()
        info = tarfile.TarInfo(f"{NAME}-{VERSION}/README")
        info.size, info.mtime = len(data), 1_700_000_000
        tar.addfile(info, io.BytesIO(data))
    stream = raw.getvalue()
    return gzip.compress(stream, compresslevel=level, mtime=mtime), hashlib.sha256(
        stream).hexdigest()


class Upstream:
    """Files served by path on 127.0.0.1 (404 for any other), with a count of requests; a
    path in `fail_first` answers 503 that many times first."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.fail_first: dict[str, int] = {}
        self.hits: list[str] = []
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                upstream.hits.append(self.path)
                body = upstream.files.get(self.path)
                if upstream.fail_first.get(self.path, 0) > 0:
                    upstream.fail_first[self.path] -= 1
                    body = None
                    self.send_response(503)
                elif body is None:
                    self.send_response(404)
                else:
                    self.send_response(200)
                payload = body or b"no\n"
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture()
def good() -> tuple[bytes, str]:
    return make_tar("the release as tagged\n")


def write_pins(path: Path, url: str, sha: str) -> Path:
    path.write_text("# name version upstream-url sha256-of-the-uncompressed-tar\n"
                    f"{NAME}  {VERSION}  {url}  {sha}\n")
    return path


def fetch(tmp_path: Path, pins: Path, *args: str, mirror: Path | None = None,
          extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("SQUALL_DEPS") or k.endswith("_TARBALL"))}
    env |= {"SQUALL_DEPS_PINS": str(pins), "SQUALL_DEPS_CACHE": str(tmp_path / "cache")}
    if mirror is not None:
        env["SQUALL_DEPS_MIRROR"] = str(mirror)
    env |= extra or {}
    return subprocess.run([sys.executable, str(FETCH), NAME, *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fetch-dep: "), lines
    return lines[0]


def leftovers(*dirs: Path) -> list[Path]:
    return sorted(p for d in dirs if d.is_dir() for p in d.iterdir())


def test_fetches_from_upstream_checks_it_and_caches_it(tmp_path, upstream, good):
    data, sha = good
    upstream.files[f"/{FILE}"] = data
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    dest = tmp_path / "out" / "demo.tar.gz"
    proc = fetch(tmp_path, pins, str(dest))
    assert proc.returncode == 0, proc.stderr
    line = one_line(proc)
    assert f"from {upstream.base}/{FILE}" in line and "as pinned" in line, line
    assert dest.read_bytes() == data and proc.stdout.strip() == str(dest)
    assert leftovers(dest.parent) == [dest]
    assert upstream.hits == [f"/{FILE}"]
    # a second run takes the checked file from the cache: upstream is not asked again
    proc = fetch(tmp_path, pins, str(dest))
    assert proc.returncode == 0, proc.stderr
    assert "from the cache " in one_line(proc), proc.stderr
    assert upstream.hits == [f"/{FILE}"]
    assert leftovers(tmp_path / "cache") == [tmp_path / "cache" / FILE]


def test_without_a_destination_it_prints_the_checked_file(tmp_path, upstream, good):
    data, sha = good
    upstream.files[f"/{FILE}"] = data
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    proc = fetch(tmp_path, pins)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).read_bytes() == data


def test_the_pin_survives_another_gzip(tmp_path, upstream, good):
    data, sha = good
    other, other_sha = make_tar("the release as tagged\n", level=1, mtime=12345)
    assert other != data and other_sha == sha
    upstream.files[f"/{FILE}"] = other
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"))
    assert proc.returncode == 0, proc.stderr


def test_a_failing_upstream_is_tried_again(tmp_path, upstream, good):
    data, sha = good
    upstream.files[f"/{FILE}"] = data
    upstream.fail_first[f"/{FILE}"] = 1
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"))
    assert proc.returncode == 0, proc.stderr
    assert len(upstream.hits) == 2
    assert (tmp_path / "d.tar.gz").read_bytes() == data


def test_a_wrong_hash_is_refused_and_nothing_is_left(tmp_path, upstream, good):
    _, sha = good
    tampered, tampered_sha = make_tar("the release with a change\n")
    upstream.files[f"/{FILE}"] = tampered
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    out = tmp_path / "out"
    out.mkdir()
    proc = fetch(tmp_path, pins, str(out / "demo.tar.gz"))
    assert proc.returncode != 0
    line = one_line(proc)
    assert f"expected {sha}" in line and f"got {tampered_sha}" in line, line
    assert f"{upstream.base}/{FILE}" in line, line
    assert leftovers(out, tmp_path / "cache") == []


def test_a_file_that_is_no_gzip_is_refused(tmp_path, upstream, good):
    _, sha = good
    upstream.files[f"/{FILE}"] = b"<html>a login page</html>\n"
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"))
    assert proc.returncode != 0
    assert "not a gzip" in one_line(proc), proc.stderr
    assert leftovers(tmp_path / "cache") == [] and not (tmp_path / "d.tar.gz").exists()


def test_the_mirror_is_used_and_upstream_not_asked(tmp_path, upstream, good):
    data, sha = good
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / FILE).write_bytes(data)
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    dest = tmp_path / "d.tar.gz"
    proc = fetch(tmp_path, pins, str(dest), mirror=mirror)
    assert proc.returncode == 0, proc.stderr
    assert f"from the mirror {mirror / FILE}" in one_line(proc), proc.stderr
    assert dest.read_bytes() == data and upstream.hits == []


def test_what_the_mirror_gave_is_kept_in_the_cache(tmp_path, upstream, good):
    data, sha = good
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / FILE).write_bytes(data)
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    assert fetch(tmp_path, pins, mirror=mirror).returncode == 0
    (mirror / FILE).unlink()
    proc = fetch(tmp_path, pins)  # no mirror named now, and upstream answers 404
    assert proc.returncode == 0, proc.stderr
    assert "from the cache " in one_line(proc)
    assert Path(proc.stdout.strip()).read_bytes() == data and upstream.hits == []


def test_a_damaged_cache_is_not_used(tmp_path, upstream, good):
    data, sha = good
    upstream.files[f"/{FILE}"] = data
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / FILE).write_bytes(make_tar("an older release\n")[0])
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"))
    assert proc.returncode == 0, proc.stderr
    assert f"from {upstream.base}/{FILE}" in one_line(proc)
    assert (tmp_path / "cache" / FILE).read_bytes() == data


def test_a_relative_mirror_is_taken_from_the_working_directory(tmp_path, upstream, good):
    data, sha = good
    (tmp_path / "shared" / "deps").mkdir(parents=True)
    (tmp_path / "shared" / "deps" / FILE).write_bytes(data)
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    proc = fetch(tmp_path, pins, "d.tar.gz", mirror=Path("shared/deps"))
    assert proc.returncode == 0, proc.stderr
    assert f"from the mirror {tmp_path / 'shared' / 'deps' / FILE}" in one_line(proc)
    assert (tmp_path / "d.tar.gz").read_bytes() == data


def test_a_mirror_file_with_a_wrong_hash_is_refused(tmp_path, upstream, good):
    _, sha = good
    tampered, tampered_sha = make_tar("not the release\n")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / FILE).write_bytes(tampered)
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"), mirror=mirror)
    assert proc.returncode != 0
    line = one_line(proc)
    assert f"expected {sha}" in line and f"got {tampered_sha}" in line
    assert str(mirror / FILE) in line
    assert not (tmp_path / "d.tar.gz").exists() and leftovers(tmp_path / "cache") == []


def test_neither_mirror_nor_upstream_fails_in_one_line_naming_both(tmp_path, upstream, good):
    _, sha = good  # upstream answers 404
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    url = f"{upstream.base}/{FILE}"
    pins = write_pins(tmp_path / "pins.txt", url, sha)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"), mirror=mirror)
    assert proc.returncode != 0
    line = one_line(proc)
    assert str(mirror / FILE) in line and url in line and "404" in line, line
    assert "SQUALL_DEPS_MIRROR" in line, line
    assert not (tmp_path / "d.tar.gz").exists()


def test_no_mirror_named_and_no_network_says_how_to_name_one(tmp_path, good):
    _, sha = good
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/{FILE}"
    pins = write_pins(tmp_path / "pins.txt", url, sha)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"))
    assert proc.returncode != 0
    line = one_line(proc)
    assert url in line and "SQUALL_DEPS_MIRROR is not set" in line, line
    assert re.search(r"set SQUALL_DEPS_MIRROR=\S+", line), line
    assert leftovers(tmp_path / "cache") == []


def test_the_explicit_tarball_is_checked_too(tmp_path, upstream, good):
    data, sha = good
    pins = write_pins(tmp_path / "pins.txt", f"{upstream.base}/{FILE}", sha)
    mine = tmp_path / "mine.tar.gz"
    proc = fetch(tmp_path, pins, extra={"SQUALL_DEMO_TARBALL": str(mine)})
    assert proc.returncode != 0
    assert f"SQUALL_DEMO_TARBALL={mine}: no such file" in one_line(proc)
    mine.write_bytes(make_tar("edited locally\n")[0])
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"),
                 extra={"SQUALL_DEMO_TARBALL": str(mine)})
    assert proc.returncode != 0
    assert f"expected {sha}" in one_line(proc) and "SQUALL_DEMO_TARBALL" in proc.stderr
    mine.write_bytes(data)
    proc = fetch(tmp_path, pins, str(tmp_path / "d.tar.gz"),
                 extra={"SQUALL_DEMO_TARBALL": str(mine)})
    assert proc.returncode == 0, proc.stderr
    assert f"from SQUALL_DEMO_TARBALL={mine}" in one_line(proc)
    assert upstream.hits == []


def test_a_name_without_a_pin_is_refused(tmp_path, good):
    pins = write_pins(tmp_path / "pins.txt", "http://127.0.0.1:9/x", good[1])
    env = dict(os.environ, SQUALL_DEPS_PINS=str(pins), SQUALL_DEPS_CACHE=str(tmp_path / "c"))
    proc = subprocess.run([sys.executable, str(FETCH), "nosuch"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    line = one_line(proc)
    assert "nosuch" in line and NAME in line, line


def repository_pins() -> dict[str, tuple[str, str, str]]:
    pins = {}
    for line in PINS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version, url, sha = line.split()[:4]   # then an optional without=
            pins[name] = (version, url, sha)
    return pins


def test_the_repository_pins_enroot_at_its_upstream_address():
    version, url, sha = repository_pins()["enroot"]
    assert version == "4.1.2"
    assert url == "https://github.com/NVIDIA/enroot/archive/refs/tags/v4.1.2.tar.gz"
    assert re.fullmatch(r"[0-9a-f]{64}", sha)


def test_the_repository_pins_match_the_mirror_where_there_is_one():
    """Where this project's mirror (../shared/deps beside the checkout, or the one
    SQUALL_DEPS_MIRROR names) holds a release, its uncompressed tar is the pinned one."""
    mirrors = {REPO.parent / "shared" / "deps"}
    if os.environ.get("SQUALL_DEPS_MIRROR"):
        mirrors.add(Path(os.environ["SQUALL_DEPS_MIRROR"]).resolve())
    for name, (version, _, _) in repository_pins().items():
        for copy in (m / f"{name}-{version}.tar.gz" for m in mirrors):
            if copy.is_file():   # checked as fetch-dep checks it (a without= pin too)
                proc = subprocess.run(
                    [sys.executable, str(FETCH), name, str(REPO / "build" / "pin-check")],
                    env={**os.environ, "SQUALL_DEPS_MIRROR": str(copy.parent),
                         "SQUALL_DEPS_CACHE": str(REPO / "build" / "pin-check-cache")},
                    capture_output=True, text=True, timeout=120)
                assert proc.returncode == 0, f"{copy} is not the release pinned: {proc.stderr}"


def release_tar(files: dict[str, str]) -> bytes:
    """A gzipped tar of FILES (name: text) under demo-1.0/."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{NAME}-{VERSION}/{name}")
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def test_a_pin_without_a_folder_takes_upstream_and_the_mirror_alike(tmp_path, upstream):
    """A mirror that left a folder out (Pyxis's tests/ in ../shared/deps) and the upstream
    archive that has it: `without=tests/` pins the hash of the other files, so a clone
    with internet fetches upstream and one without takes the mirror; any other change is
    refused."""
    release = {"README": "the release\n", "src/a.c": "int a;\n"}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / FILE).write_bytes(release_tar(release))
    pins = tmp_path / "pins.txt"

    def pin(sha: str) -> None:
        pins.write_text(f"{NAME} {VERSION} {upstream.base}/{FILE} {sha} without=tests/\n")

    pin("0" * 64)
    got = re.search(r"got ([0-9a-f]{64})", one_line(fetch(tmp_path, pins, mirror=mirror)))
    assert got, "the refusal names the hash it computed"
    pin(got.group(1))
    proc = fetch(tmp_path, pins, mirror=mirror)
    assert proc.returncode == 0 and "from the mirror" in proc.stdout + proc.stderr, proc
    upstream.files[f"/{FILE}"] = release_tar({**release, "tests/t.bats": "@test x\n"})
    proc = fetch(tmp_path, pins, extra={"SQUALL_DEPS_CACHE": str(tmp_path / "c2")})
    assert proc.returncode == 0, proc.stderr
    upstream.files[f"/{FILE}"] = release_tar({**release, "src/a.c": "int b;\n"})
    proc = fetch(tmp_path, pins, extra={"SQUALL_DEPS_CACHE": str(tmp_path / "c3")})
    assert proc.returncode != 0 and "refused" in one_line(proc), proc.stderr
