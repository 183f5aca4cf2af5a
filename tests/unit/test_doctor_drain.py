"""squall doctor --drain against a stand-in scontrol (test double: it keeps one node's
state and reason in a JSON file and logs every call); the real one is exercised on the
mini cluster (tests/integration/test_doctor_cluster.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from squall_cli import run_squall

from squall.efa import drain
from squall.errors import SetupError

STANDIN = r'''#!{python}
"""Stand-in for scontrol (test double): show node --oneliner N / update NodeName=N ..."""
import json, sys
state_file = {state!r}
st = json.load(open(state_file))
st["calls"].append(sys.argv[1:])
args = sys.argv[1:]
if args[:3] == ["show", "node", "--oneliner"]:
    if args[3] != st["name"]:
        print(f"Node {{args[3]}} not found", file=sys.stderr); sys.exit(1)
    reason = f" Reason={{st['reason']}} [root@2026-01-02T03:04:05]" if st["reason"] else ""
    print(f"NodeName={{st['name']}} Arch=x86_64 CoresPerSocket=4 CPUAlloc=0 "
          f"State={{st['state']}} ThreadsPerCore=1 Partitions=debug{{reason}}")
elif args[0] == "update":
    kv = dict(a.split("=", 1) for a in args[1:])
    if kv["State"] == "DRAIN":
        st["state"], st["reason"] = st["state"].split("+")[0] + "+DRAIN", kv["Reason"]
    elif kv["State"] == "RESUME":
        st["state"], st["reason"] = st["state"].split("+")[0], ""
else:
    sys.exit(2)
json.dump(st, open(state_file, "w"))
'''


class Node:
    """The stand-in's node: its state file and the scontrol calls made."""

    def __init__(self, tmp: Path, state: str = "IDLE", reason: str = "") -> None:
        self.file = tmp / "node.json"
        self.file.write_text(json.dumps({"name": "n1", "state": state, "reason": reason,
                                         "calls": []}))
        self.scontrol = tmp / "scontrol-stand-in"
        self.scontrol.write_text(STANDIN.format(python=sys.executable, state=str(self.file)))
        self.scontrol.chmod(0o755)

    @property
    def st(self) -> dict:
        return json.loads(self.file.read_text())

    def updates(self) -> list[list[str]]:
        return [c for c in self.st["calls"] if c[0] == "update"]


FAIL = [("shared-fs /fsx", "not a directory"), ("enroot", "'enroot' not found")]


def test_a_failure_drains_with_a_short_reason(tmp_path):
    node = Node(tmp_path)
    said = drain.apply(FAIL, "n1", str(node.scontrol))
    reason = "squall doctor: shared-fs /fsx: not a directory (+1 more: enroot)"
    assert said == f"n1 drained: {reason}"
    assert node.st["state"] == "IDLE+DRAIN" and node.st["reason"] == reason
    assert node.updates() == [["update", "NodeName=n1", "State=DRAIN", f"Reason={reason}"]]


def test_the_same_failure_again_changes_nothing(tmp_path):
    node = Node(tmp_path, "IDLE+DRAIN", drain.reason_for(FAIL))
    assert drain.apply(FAIL, "n1", str(node.scontrol)).startswith("n1 stays drained")
    assert node.updates() == []


def test_a_new_failure_updates_our_reason(tmp_path):
    node = Node(tmp_path, "MIXED+DRAIN", drain.reason_for(FAIL[1:]))
    drain.apply(FAIL, "n1", str(node.scontrol))
    assert node.st["reason"] == drain.reason_for(FAIL)


def test_an_admins_drain_is_never_touched(tmp_path):
    node = Node(tmp_path, "IDLE+DRAIN", "bad DIMM, ticket 42")
    assert drain.apply(FAIL, "n1", str(node.scontrol)) == (
        "n1 left drained (reason: bad DIMM, ticket 42)")
    assert drain.apply([], "n1", str(node.scontrol)) == (
        "n1 healthy, left drained (reason: bad DIMM, ticket 42)")
    assert node.updates() == [] and node.st["reason"] == "bad DIMM, ticket 42"


def test_passing_resumes_only_what_squall_drained(tmp_path):
    node = Node(tmp_path, "IDLE+DRAIN", drain.reason_for(FAIL))
    assert drain.apply([], "n1", str(node.scontrol)).startswith("n1 resumed")
    assert node.st["state"] == "IDLE" and node.updates() == [
        ["update", "NodeName=n1", "State=RESUME"]]
    assert drain.apply([], "n1", str(node.scontrol)) == "n1 healthy"
    assert len(node.updates()) == 1


def test_reason_is_bounded():
    long = [("shared-fs /" + "x" * 300, "not a directory")]
    reason = drain.reason_for(long)
    assert len(reason) == drain.REASON_MAX and reason.endswith("...")


@pytest.mark.parametrize("text,state,reason", [
    # 24.11 and 22.05 put Reason late in the line, followed by [user@time]
    ("NodeName=node1 Arch=x86_64 CoresPerSocket=4 State=IDLE+DRAIN ThreadsPerCore=1 "
     "Reason=squall doctor: enroot: 'enroot' not found [root@2026-01-02T03:04:05] "
     "Comment=(null)", "IDLE+DRAIN", "squall doctor: enroot: 'enroot' not found"),
    ("NodeName=node2 Arch=x86_64 State=IDLE ThreadsPerCore=1", "IDLE", ""),
    ("NodeName=node3 State=DOWN+DRAIN+NOT_RESPONDING Reason=Not responding "
     "[slurm@2026-01-02T03:04:05]", "DOWN+DRAIN+NOT_RESPONDING", "Not responding"),
])
def test_parse_show_node(text, state, reason):
    node = drain.parse_show_node(text)
    assert (node.state, node.reason) == (state, reason)
    assert node.drained == ("DRAIN" in state)


def test_unknown_node_and_missing_scontrol_are_setup_errors(tmp_path):
    node = Node(tmp_path)
    with pytest.raises(SetupError, match="Node n9 not found.*give --node NAME"):
        drain.apply(FAIL, "n9", str(node.scontrol))
    with pytest.raises(SetupError, match="not found: --drain needs the Slurm commands"):
        drain.apply(FAIL, "n1", str(tmp_path / "no-scontrol"))


def test_node_name(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-17")
    assert drain.node_name() == "gpu-17" and drain.node_name("x") == "x"
    monkeypatch.delenv("SLURMD_NODENAME")
    monkeypatch.setattr(drain.socket, "gethostname", lambda: "ip-10-0-0-1.ec2.internal")
    assert drain.node_name() == "ip-10-0-0-1"


def test_cli_drains_and_still_exits_1(monkeypatch, capsys, tmp_path):
    node = Node(tmp_path)
    rc, out, err = run_squall(monkeypatch, capsys, [
        "doctor", "--no-efa", "--shared-fs", str(tmp_path / "nofs"), "--enroot",
        str(tmp_path / "no-enroot"), "--drain", "--node", "n1", "--scontrol",
        str(node.scontrol), "--json"])
    assert rc == 1
    report = json.loads(out)
    assert report["drain"].startswith("n1 drained: squall doctor: shared-fs ")
    lines = err.splitlines()
    assert lines[0] == f"squall: {report['drain']}" and lines[1].startswith("squall: error: ")
    assert node.st["state"] == "IDLE+DRAIN"


def test_cli_scontrol_failure_is_2(monkeypatch, capsys, tmp_path):
    rc, out, err = run_squall(monkeypatch, capsys, [
        "doctor", "--no-efa", "--shared-fs", "/proc", "--drain", "--scontrol",
        str(tmp_path / "none"), "-q"])
    assert rc == 2 and out == "" and "--drain needs the Slurm commands" in err
