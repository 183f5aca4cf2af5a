"""In-job failover: which nodes run, which wait, what a lost node changes; heartbeats by
the watcher's own clock; the recipe fields and the script mksbatch writes for them."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from gate import need_tool
from squall.errors import UsageError
from squall.failover import launch
from squall.failover.heartbeat import Watcher
from squall.failover.plan import Plan
from squall.failover.spec import Spec
from squall.mksbatch.recipe import RecipeError, recipe_from_dict
from squall.mksbatch.render import render

BASE = {"name": "fo", "nodes": 2, "log_dir": "/fsx/logs", "launcher": "srun",
        "command": ["python3", "train.py"]}


def test_the_batch_host_waits_as_the_last_spare():
    plan = Plan.initial(["n1", "n2", "n3", "n4"], 2, batch_host="n1")
    assert plan.active == ("n2", "n3") and plan.spares == ("n4", "n1")
    assert Plan.initial(["n1", "n2"], 2, "n1").active == ("n2", "n1")  # no spare: used


def test_a_spare_takes_the_lost_nodes_place_rank_0_included():
    plan = Plan.initial(["n1", "n2", "n3", "n4"], 2, batch_host="n1")
    after = plan.replace({"n2"})
    assert after is not None and after.active == ("n4", "n3") and after.spares == ("n1",)
    assert after.lost == ("n2",)
    again = after.replace({"n3"})
    assert again is not None and again.active == ("n4", "n1") and again.spares == ()
    assert again.replace({"n4"}) is None  # no spare left: requeue


def test_a_lost_spare_is_never_used():
    plan = Plan.initial(["n1", "n2", "n3", "n4"], 2, batch_host="n1").drop_spares({"n4"})
    assert plan.spares == ("n1",) and plan.lost == ("n4",)


def test_heartbeats_count_by_change_not_by_timestamp(tmp_path):
    w = Watcher(tmp_path)
    (tmp_path / "node.a").write_text("1 0\n")
    future = time.time() + 365 * 86400
    os.utime(tmp_path / "node.a", (future, future))  # a lying clock changes nothing
    w.poll(["a", "b"])
    assert w.silent("a") < 0.5 and w.silent("b") < 0.5
    time.sleep(0.3)
    w.poll(["a", "b"])
    assert w.silent("a") >= 0.3 and w.silent("b") >= 0.3  # b never came, a never changed
    (tmp_path / "node.a").write_text("2 1\n")
    w.poll(["a"])
    assert w.silent("a") < 0.1 and w.stopped("a") == 1


def test_the_supervisor_looks_once_a_second_with_a_stat_per_node(tmp_path, monkeypatch):
    """Issue 27: the supervisor of a 17-node job cost GlusterFS's server about 3,400
    operations a second (every 0.25 s an open, a read and a stat of every node's file).
    Now a look a second, a stat per node; a node's file read only when hangs are watched
    (its count of stopped tasks) and it changed."""
    import squall.failover.heartbeat as hb

    nodes = [f"n{i}" for i in range(8)]
    for n in nodes:
        (tmp_path / f"node.{n}").write_text("1 0\n")
    calls = {"stat": 0, "open": 0}
    real_stat, real_open = os.stat, open

    def stat(path, *a, **k):  # type: ignore[no-untyped-def]
        calls["stat"] += 1
        return real_stat(path, *a, **k)

    def opened(path, *a, **k):  # type: ignore[no-untyped-def]
        calls["open"] += 1
        return real_open(path, *a, **k)

    monkeypatch.setattr(hb.os, "stat", stat)
    monkeypatch.setattr(hb, "open", opened, raising=False)
    w = Watcher(tmp_path, every=1.0, read_nodes=False)
    start = time.monotonic()
    while time.monotonic() - start < 2.1:  # the supervisor's loop: every 0.25 s
        w.poll(nodes)
        for n in nodes[:4]:  # half the nodes beat (a new file each time, as the agent)
            (tmp_path / f"node.{n}.tmp").write_text("2 0\n")
            os.replace(tmp_path / f"node.{n}.tmp", tmp_path / f"node.{n}")
        time.sleep(0.25)
    assert calls["stat"] <= 3 * len(nodes) and calls["open"] == 0, calls
    assert w.silent("n0") < 1.2 and w.silent("n7") > 2.0  # beats seen, silence measured
    hang = Watcher(tmp_path, every=1.0, read_nodes=True)
    (tmp_path / "node.n0").write_text("3 2\n")
    hang.poll(["n0"])
    assert hang.stopped("n0") == 2


def test_progress_is_the_newest_change_of_any_rank(tmp_path):
    w = Watcher(tmp_path)
    time.sleep(0.2)
    w.poll([])
    assert w.idle() >= 0.2
    (tmp_path / "progress.0").write_text("")
    w.poll([])
    assert w.idle() < 0.1


def test_spec_round_trip_and_bad_spec():
    spec = Spec(nodes=2, spares=1, launcher="srun", command=("a", "b"))
    assert Spec.from_json(spec.to_json()) == spec
    for bad in ("{", "[]", '{"nodes": 0, "spares": 0, "launcher": "srun", "command": []}',
                '{"nodes": 1, "spares": 0, "launcher": "ssh", "command": []}'):
        with pytest.raises(UsageError, match="regenerate"):
            Spec.from_json(bad)


def test_spares_allocate_more_nodes_without_kill_and_launch_the_supervisor():
    script = render(recipe_from_dict({**BASE, "spares": 1}))
    assert "#SBATCH --nodes=3-3" in script and "#SBATCH --no-kill" in script
    assert "launch=(squall failover " in script and "srun_args=" not in script
    plain = render(recipe_from_dict(BASE))
    assert "--no-kill" not in plain and "squall failover" not in plain


def test_the_failover_script_passes_shellcheck(tmp_path):
    shellcheck = need_tool("shellcheck", "shellcheck")
    recipe = {**BASE, "spares": 2, "failover": {"detect_seconds": 5, "hang_seconds": 60},
              "checkpoint": {"dir": "/fsx/ck", "complete_marker": "DONE",
                             "resume": "--resume {checkpoint}"},
              "container": {"image": "/fsx/i.sqsh"}}
    path = tmp_path / "job.sbatch"
    path.write_text(render(recipe_from_dict(recipe)))
    subprocess.run(["bash", "-n", str(path)], check=True)
    subprocess.run([shellcheck, str(path)], check=True)
    spec = Spec.from_json(path.read_text().split("failover_spec='", 1)[1].split("'\n")[0])
    assert spec.nodes == 2 and spec.spares == 2 and spec.detect_seconds == 5
    assert spec.checkpoint is not None and spec.checkpoint.resume == ("--resume",
                                                                       "{checkpoint}")
    assert spec.container_args == ("--container-image=/fsx/i.sqsh",)


@pytest.mark.parametrize("extra,message", [
    ({"spares": -1}, "spares: must be between 0 and 64"),
    ({"failover": {"detect_seconds": 1}}, "detect_seconds: must be between 2 and 3600"),
    ({"failover": {"detect_seconds": 30, "hang_seconds": 10}}, "shorter than"),
    ({"failover": {"every": 3}}, "unknown field"),
])
def test_bad_failover_fields_are_one_line(extra, message):
    with pytest.raises(RecipeError, match=message):
        recipe_from_dict({**BASE, **extra})


def test_watch_shows_each_failover_line_once(tmp_path):
    from squall.mksbatch.watch import FailoverLines
    log = tmp_path / "job.out"
    log.write_text("squall: job 7 on n[1-3]\nsquall: failover: node n2 lost: no heartbe")
    lines = FailoverLines(log)
    assert lines.new() == []  # half a line: not yet
    with open(log, "a") as f:
        f.write("at for 10.2 s\nsomething else\nsquall: failover: relaunching on n3,n1\n")
    assert lines.new() == ["node n2 lost: no heartbeat for 10.2 s", "relaunching on n3,n1"]
    assert lines.new() == [] and FailoverLines(None).new() == []


def test_elastic_goes_on_with_fewer_nodes_down_to_min_nodes():
    plan = Plan(("n1", "n2", "n3"), ("n4",))
    assert plan.replace({"n2", "n3"}) is None  # one spare for two lost nodes
    fewer = plan.shrink({"n2", "n3"}, min_nodes=2)
    assert fewer is not None and fewer.active == ("n1", "n4") and fewer.spares == ()
    assert plan.shrink({"n1", "n2", "n3"}, min_nodes=2) is None  # only n4 is left
    assert fewer.shrink({"n1"}, min_nodes=1) == Plan(("n4",), (), ("n1", "n2", "n3"))


def test_ft_launcher_is_torchrun_shaped_in_the_script_and_the_supervisor():
    r = recipe_from_dict({**BASE, "launcher": "ft_launcher", "gpus_per_node": 4})
    script = render(r)
    assert "#SBATCH --ntasks-per-node=1" in script
    assert '"${container_args[@]}" ft_launcher' in script and " torchrun" not in script
    r = recipe_from_dict({**BASE, "launcher": "ft_launcher", "spares": 1,
                          "failover": {"elastic": True, "min_nodes": 1}})
    spec = Spec.from_json(next(line for line in render(r).splitlines()
                               if line.startswith("failover_spec="))
                          .split("=", 1)[1].strip("'"))
    assert spec.launcher == "ft_launcher" and spec.elastic and spec.min_nodes == 1
    argv = launch.main_argv(spec, "77", 0, ["n2", "n3"], "n[2-3]", None)
    assert argv[argv.index("ft_launcher"):][:2] == ["ft_launcher", "--nnodes=2"], argv
    assert "--rdzv-endpoint=n2:30270" in argv, argv
    assert "--distribution=block" in argv and "--nodelist=n2,n3" in argv, argv
    assert argv[argv.index("ft_launcher") - 2:][:2] == ["env", "SLURM_NODELIST=n[2-3]"]


def test_a_relaunch_keeps_slurm_s_rank_order_and_moves_rank_0_with_it(tmp_path):
    """After n3 is lost the new set is {n2, n1}: Slurm puts rank 0 on n1 (its node table
    order), and MASTER_ADDR, the nodelist and the endpoint follow."""
    spec = Spec(nodes=2, spares=1, launcher="srun", command=("train",))
    nodes = launch.slurm_order(["n2", "n1"], ["n1", "n2", "n3"])
    assert nodes == ["n1", "n2"]
    argv = launch.main_argv(spec, "7", 1, nodes, "n[1-2]", None)
    assert "--distribution=block" in argv and "--distribution=arbitrary" not in argv
    assert argv[-3:] == ["env", "SLURM_NODELIST=n[1-2]", "train"]
    env = launch.step_env({"SLURM_HOSTFILE": "/x"}, spec, "7", 1, nodes, tmp_path)
    assert env["MASTER_ADDR"] == "n1" and "SLURM_HOSTFILE" not in env
    assert env["SQUALL_PEER_LOST_FILE"] == str(tmp_path / "peer-lost.1")
    mpi = Spec(nodes=2, spares=1, launcher="mpirun", command=("./a",), tasks_per_node=2)
    assert launch.main_argv(mpi, "7", 1, nodes, "n[1-2]", None)[:3] == [
        "mpirun", "--host", "n1:2,n2:2"]


def test_the_spare_warm_up_has_a_command_srun_takes():
    argv = launch.warm_argv(["n1"], ["--container-image=/i.sqsh"])
    # the shell every image has, not a program a small image may lack; no ':' for srun
    assert argv[-3:] == ["sh", "-c", "exit 0"] and ":" not in argv


def test_steps_lost_from_the_reported_count_and_the_checkpoint_name(tmp_path):
    from squall.failover.supervise import steps_lost

    w = Watcher(tmp_path)
    assert w.steps_done() is None
    (tmp_path / "progress.0").write_text(f"{25:012d}\n")
    (tmp_path / "progress.1").write_text(f"{24:012d}\n")
    w.poll([])
    assert w.steps_done() == 25
    assert steps_lost(25, "/fsx/ck/ckpt-000020") == 5
    assert steps_lost(25, "/fsx/ck/step_20/") == 5
    assert steps_lost(7, None) == 7          # no checkpoint: all of it
    assert steps_lost(None, "/fsx/ck/ckpt-20") is None
    assert steps_lost(3, "/fsx/ck/latest") is None  # a name without the step


def test_the_agent_rewrites_its_file_in_place(tmp_path):
    """One open of one path a beat (no temporary file and rename: seven path lookups on
    /fsx), a fixed width so that no byte of an earlier beat is left."""
    import subprocess

    from squall.failover.heartbeat import AGENT

    env = {**os.environ, "SLURMD_NODENAME": "n1"}
    agent = subprocess.Popen(["sh", "-c", AGENT, str(tmp_path), "stopped"], env=env)
    try:
        path = tmp_path / "node.n1"
        deadline = time.monotonic() + 5
        while not path.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first = os.stat(path)
        time.sleep(2.2)
        data = path.read_text()
        assert os.stat(path).st_ino == first.st_ino and os.stat(path).st_size == first.st_size
        count, stopped = data.split()
        assert int(count) >= 2 and int(stopped) == 0 and data.endswith("\n"), data
        assert sorted(p.name for p in tmp_path.iterdir()) == ["node.n1"]
    finally:
        agent.kill()
        agent.wait()


def test_the_agent_counts_stopped_tasks_only_when_hangs_are_watched(tmp_path):
    """Counting means a look at every process of the node each beat: a stopped task of
    the step is counted with the flag, and without it nothing is looked at."""
    import signal
    import subprocess

    from squall.failover.heartbeat import AGENT, agent_argv

    assert agent_argv("/d", ["n1"], "hb")[-1] == "stopped"
    assert agent_argv("/d", ["n1"], "hb", count_stopped=False)[-1] == ""
    task = subprocess.Popen(["sleep", "60"], env={**os.environ,
                                                  "SQUALL_FAILOVER_ATTEMPT": "0"})
    task.send_signal(signal.SIGSTOP)
    agents = []
    try:
        for flag in ("stopped", ""):
            d = tmp_path / (flag or "none")
            d.mkdir()
            agents.append(subprocess.Popen(["sh", "-c", AGENT, str(d), flag],
                                           env={**os.environ, "SLURMD_NODENAME": "n1"}))
        time.sleep(1.5)
        assert int((tmp_path / "stopped" / "node.n1").read_text().split()[1]) >= 1
        assert int((tmp_path / "none" / "node.n1").read_text().split()[1]) == 0
    finally:
        for a in agents:
            a.kill()
            a.wait()
        task.kill()
        task.wait()


@pytest.mark.parametrize("command, no_python", [
    (["python", "train.py", "--epochs", "3"], True),     # the example recipes' habit
    (["python3", "train.py"], True),
    (["/opt/conda/bin/python3.11", "train.py"], True),
    (["./run.sh", "--fast"], True),                        # a program, not a script
    (["train.py", "--epochs", "3"], False),                # torchrun's own form
    (["-m", "pkg.train"], False),                          # torchrun -m MODULE
    (["--no-python", "python", "train.py"], False),        # said already
])
def test_torchrun_runs_the_command_as_written(command, no_python):
    """torchrun runs its first word with Python unless told --no-python: `python
    train.py` would run Python on a file named python. The script and the supervisor
    add --no-python where the command does not start with a .py script or an option."""
    r = recipe_from_dict({**BASE, "launcher": "torchrun", "command": command, "spares": 1})
    spec = Spec.from_json(next(line for line in render(r).splitlines()
                               if line.startswith("failover_spec="))
                          .split("=", 1)[1].strip("'"))
    argv = launch.main_argv(spec, "77", 0, ["n2", "n3"], "n[2-3]", None)
    tail = argv[argv.index("--rdzv-id=squall-77-0") + 1:]
    assert tail[:len(command) + no_python] == (["--no-python"] if no_python else []) + command
    script = render(recipe_from_dict({**BASE, "launcher": "torchrun", "command": command}))
    block = script[script.index("launch=(srun"):]
    block = block[:block.index(")\n")]
    assert ("--no-python" in block) == no_python, block
