"""squall nccl-check on the constructed corpus in tests/data/nccl-logs/ (see its README)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from squall_cli import run_squall

from squall.efa import nccl_check

CORPUS = Path(__file__).resolve().parents[1] / "data" / "nccl-logs"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())


def run_main(monkeypatch, capsys, *args, stdin=None):
    return run_squall(monkeypatch, capsys, list(args), stdin=stdin)


def test_every_log_has_an_expectation():
    assert sorted(p.name for p in CORPUS.glob("*.log")) == sorted(EXPECTED)


def test_corpus_says_it_is_constructed():
    assert "constructed excerpts, not logs captured from hardware" in (
        CORPUS / "README.md").read_text()
    for log in CORPUS.glob("*.log"):
        assert "not captured from hardware" in log.read_text().splitlines()[0]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_verdicts(monkeypatch, capsys, name):
    want = EXPECTED[name]
    rc, out, err = run_main(monkeypatch, capsys, "nccl-check", "--json", str(CORPUS / name))
    report = json.loads(out)
    assert report["ok"] is want["ok"]
    assert rc == (0 if want["ok"] else 1)
    procs = report["processes"]
    assert len(procs) == want["processes"]
    assert Counter(p["transport"] for p in procs) == Counter(want["transport"])
    efa = [p for p in procs if p["transport"] == "efa"]
    if want["gdr"] is not None:
        assert {p["gdr"] for p in efa} == {want["gdr"]}
        assert {p["nics"] for p in efa} == {want["nics"]}
    assert all(p["rank"] is not None for p in procs)
    first = report["first_fallback"]
    if want["first_fallback"] is None:
        assert first is None and err == ""
    else:
        assert first["host"] == want["first_fallback"]
        assert first["rank"] == want["first_fallback_rank"]
        assert first["cause"] == want["cause"]
        lines = err.splitlines()
        assert len(lines) == 1
        assert lines[0].startswith(f"squall: error: {want['first_fallback']} (rank ")
        assert f"fell back to TCP sockets: {want['cause']}" in lines[0]


def test_table_output(monkeypatch, capsys):
    rc, out, _ = run_main(monkeypatch, capsys, "nccl-check", str(CORPUS / "g5-efa-no-gdr.log"))
    assert rc == 0
    rows = out.splitlines()
    assert rows[0].split() == ["HOST", "RANK", "PID", "GPU", "TRANSPORT"]
    assert rows[1].startswith("ip-10-2-0-21  0/2")
    assert "EFA without GPUDirect RDMA (1 nics, aws-ofi-nccl 1.13.2)" in rows[1]


def test_many_logs_mixed_on_stdin(monkeypatch, capsys):
    text = "".join((CORPUS / n).read_text() for n in ("p5-efa-gdr.log", "plugin-missing.log"))
    rc, out, err = run_main(monkeypatch, capsys, "nccl-check", "--json", stdin=text)
    report = json.loads(out)
    assert rc == 1 and len(report["processes"]) == 20
    assert report["first_fallback"]["host"] == "ip-10-3-0-31"


def test_files_and_stdin_together(monkeypatch, capsys):
    rc, out, _ = run_main(monkeypatch, capsys, "nccl-check", "--json",
                          str(CORPUS / "p5-efa-gdr.log"), "-",
                          stdin=(CORPUS / "g5-efa-no-gdr.log").read_text())
    assert rc == 0 and len(json.loads(out)["processes"]) == 18


def test_no_nccl_lines_is_an_error(monkeypatch, capsys):
    rc, out, err = run_main(monkeypatch, capsys, "nccl-check", stdin="training...\nloss 1.2\n")
    assert rc == 2 and out == ""  # nothing to judge by: not a fallback found
    assert err.splitlines() == [err.strip()] and "NCCL_DEBUG=INFO" in err


def test_missing_file_is_one_line(monkeypatch, capsys, tmp_path):
    rc, _, err = run_main(monkeypatch, capsys, "nccl-check", str(tmp_path / "nope.log"))
    assert rc == 2
    assert err.strip() == (f"squall: error: cannot read log {tmp_path / 'nope.log'}: No such "
                           "file or directory: give an existing file, or - for stdin")


# --- parser details on single lines ----------------------------------------------------

def _one(lines):
    report = nccl_check.parse(lines)
    assert len(report.processes) == 1
    return report.processes[0]


def test_old_and_new_provider_lines():
    new = _one(["h:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa "
                "(found 16 nics)", "h:1:1 [0] NCCL INFO Using network Libfabric"])
    old = _one(["h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
                "h:1:1 [0] NCCL INFO Using network AWS Libfabric"])
    assert (new.nics, new.transport, old.nics, old.transport) == (16, "efa", 4, "efa")


def test_channels_alone_decide_without_using_network():
    p = _one(["h:1:1 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/Libfabric/3"])
    assert (p.transport, p.gdr) == ("efa", False)
    p = _one(["h:1:1 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/Socket/0"])
    assert p.fell_back


def test_plugin_not_found_beats_ib_no_device():
    p = _one(["h:1:1 [0] NCCL INFO NET/IB : No device found.",
              "h:1:1 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation",
              "h:1:1 [0] NCCL INFO Using network Socket"])
    assert p.cause == "plugin not found"


def test_single_node_job_is_not_a_fallback():
    report = nccl_check.parse(["h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
                               "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE"])
    assert report.ok and report.processes[0].transport == "unknown"


def test_assigned_net_plugin_line():
    p = _one(["h:1:1 [0] NCCL INFO Assigned NET plugin Socket to comm"])
    assert p.fell_back
    p = _one(["h:1:1 [0] NCCL INFO Assigned NET plugin Libfabric to comm"])
    assert p.transport == "efa"
