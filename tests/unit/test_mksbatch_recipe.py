"""Recipe validation: every malformed recipe gets its exact file:line: field: message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.mksbatch import load_recipe
from squall.mksbatch.recipe import Checkpoint, Container

BASE = """\
name: t
nodes: 2
log_dir: /fsx/logs
launcher: srun
command: [python3, train.py]
"""

# (id, recipe text, exact message). Line numbers refer to the text as written.
CASES = [
    ("empty", "", "r.yaml:1: recipe: the file is empty: write the recipe fields "
     "(see docs/mksbatch.md)"),
    ("list at top", "- a\n- b\n", "r.yaml:1: recipe: the top level must be a mapping of "
     "fields (name: ..., nodes: ...), not a list or a single value"),
    ("yaml syntax", "name: t\nnodes: [2\n", "r.yaml:3: YAML syntax: expected ',' or ']', "
     "but got '<stream end>': fix the YAML at this line"),
    ("missing name", "nodes: 2\nlog_dir: /l\nlauncher: srun\ncommand: [x]\n",
     "r.yaml:1: name: missing: add it to recipe, e.g. name: my-training"),
    ("bad name", BASE.replace("name: t", "name: 'a b'"),
     "r.yaml:1: name: 'a b' may only use letters, digits and . _ - (starting with a letter "
     "or digit)"),
    ("nodes zero", BASE.replace("nodes: 2", "nodes: 0"),
     "r.yaml:2: nodes: must be at least 1, got 0"),
    ("nodes text", BASE.replace("nodes: 2", "nodes: two"),
     "r.yaml:2: nodes: must be a whole number, got 'two'"),
    ("nodes list", BASE.replace("nodes: 2", "nodes: [2]"),
     "r.yaml:2: nodes: must be a whole number, not a list or mapping"),
    ("unknown field", BASE + "nodse: 3\n",
     "r.yaml:6: nodse: unknown field (did you mean 'nodes'?); known fields here: name, "
     "target, nodes, tasks_per_node, gpus_per_node, cpus_per_task, partition, account, qos, "
     "time, exclusive, log_dir, environment, container, launcher, command, torchrun, mpi, "
     "checkpoint, requeue, signal, spares, failover, sbatch, srun, setup"),
    ("duplicate", BASE + "nodes: 3\n",
     "r.yaml:6: nodes: given twice (first at line 2): keep one"),
    ("bad launcher", BASE.replace("launcher: srun", "launcher: ssh"),
     "r.yaml:4: launcher: must be one of torchrun, ft_launcher, srun, mpirun, got 'ssh'"),
    ("bad target", BASE + "target: aws\n",
     "r.yaml:6: target: must be one of generic, parallelcluster, hyperpod, got 'aws'"),
    ("empty command", BASE.replace("[python3, train.py]", "[]"),
     "r.yaml:5: command: is an empty list: give at least one item or remove it"),
    ("unbalanced command", BASE.replace("[python3, train.py]", "python3 'train.py"),
     "r.yaml:5: command: cannot split into words (No closing quotation): write it as a YAML "
     "list instead"),
    ("command item mapping", BASE.replace("[python3, train.py]", "[python3, {a: b}]"),
     "r.yaml:5: command[1]: must be a string, not a list or mapping"),
    ("partition injection", BASE + "partition: 'gpu\\n#SBATCH --x'\n",
     "r.yaml:6: partition: 'gpu\\\\n#SBATCH --x' is written on an #SBATCH line and may only "
     "use letters, digits and . _ / % : @ + , = -"),
    ("partition newline", BASE + 'partition: "gpu\\nx"\n',
     "r.yaml:6: partition: 'gpu\\nx' is written on an #SBATCH line and may only use "
     "letters, digits and . _ / % : @ + , = -"),
    ("relative log_dir", BASE.replace("/fsx/logs", "logs"),
     "r.yaml:3: log_dir: 'logs' must be an absolute directory path without %, e.g. "
     "/fsx/logs"),
    ("bad time", BASE + "time: 1-2:3:4:5\n",
     "r.yaml:6: time: '1-2:3:4:5' is not a Slurm time: use MINUTES, HH:MM:SS or D-HH:MM:SS, "
     "e.g. \"2-00:00:00\""),
    ("exclusive text", BASE + "exclusive: maybe\n",
     "r.yaml:6: exclusive: must be true or false, got 'maybe'"),
    ("env bad name", BASE + "environment:\n  1X: a\n",
     "r.yaml:7: environment.1X: is not a valid variable name: use letters, digits and _, "
     "not starting with a digit"),
    ("env slurm name", BASE + "environment:\n  SLURM_JOB_ID: a\n",
     "r.yaml:7: environment.SLURM_JOB_ID: is set by Slurm or squall and cannot be overridden "
     "from a recipe: choose another name"),
    ("env bool", BASE + "environment:\n  A: yes\n",
     "r.yaml:7: environment.A: 'yes' is read as a YAML boolean: quote it, e.g. \"yes\""),
    ("env list", BASE + "environment: [A]\n",
     "r.yaml:6: environment: must be a mapping of fields (key: value)"),
    ("container no image", BASE + "container:\n  workdir: /w\n",
     "r.yaml:6: container.image: missing: add it to container, e.g. image: "
     "/fsx/images/train.sqsh"),
    ("container bad image", BASE + "container:\n  image: 'a b'\n",
     "r.yaml:7: container.image: --container-image: 'a b': character ' ' cannot appear in an "
     "image reference (use [USER@][REGISTRY#]IMAGE[:TAG] or a path starting with '/' or '.')"),
    ("container relative mount", BASE + "container:\n  image: /i.sqsh\n  mounts:\n"
     "    - /fsx:/fsx\n    - relative:/x\n",
     "r.yaml:10: container.mounts[1]: --container-mounts: 'relative:/x': source 'relative' "
     "must be an absolute path, a path starting with '.', tmpfs or umount"),
    ("container comma mount", BASE + "container:\n  image: /i.sqsh\n  mounts: ['/a:/a,/b:/b']\n",
     "r.yaml:8: container.mounts[0]: holds a comma: give one mount per list item"),
    ("container efa", BASE + "container:\n  image: /i.sqsh\n  efa: on\n",
     "r.yaml:8: container.efa: 'on' is read as a YAML boolean: quote it, e.g. \"on\""),
    ("container efa word", BASE + "container:\n  image: /i.sqsh\n  efa: always\n",
     "r.yaml:8: container.efa: must be one of auto, require, off, got 'always'"),
    ("container typo", BASE + "container:\n  image: /i.sqsh\n  mount: [/a:/a]\n",
     "r.yaml:8: container.mount: unknown field (did you mean 'mounts'?); known fields here: "
     "image, mounts, workdir, name, save, mount_home, remap_root, entrypoint, entrypoint_log, "
     "writable, reuse, unshare, efa, nccl_debug, log, env, prestart"),
    ("mpirun container", BASE.replace("launcher: srun", "launcher: mpirun")
     + "container:\n  image: /i.sqsh\n",
     "r.yaml:6: container: launcher: mpirun starts ranks outside any container; use "
     "launcher: srun with mpi: pmix for a containerised MPI job"),
    ("checkpoint relative", BASE + "checkpoint:\n  dir: ck\n  complete_marker: C\n"
     "  resume: --resume {checkpoint}\n",
     "r.yaml:7: checkpoint.dir: 'ck' must be an absolute path on shared storage, e.g. "
     "/fsx/checkpoints/my-run"),
    ("checkpoint no placeholder", BASE + "checkpoint:\n  dir: /ck\n  complete_marker: C\n"
     "  resume: --resume latest\n",
     "r.yaml:9: checkpoint.resume: must contain {checkpoint} where the checkpoint path goes, "
     "e.g. \"--resume {checkpoint}\""),
    ("checkpoint no marker", BASE + "checkpoint:\n  dir: /ck\n  resume: -r {checkpoint}\n",
     "r.yaml:6: checkpoint.complete_marker: missing: add it to checkpoint, e.g. "
     "complete_marker: COMPLETE"),
    ("checkpoint marker path", BASE + "checkpoint:\n  dir: /ck\n  complete_marker: a/b\n"
     "  resume: -r {checkpoint}\n",
     "r.yaml:8: checkpoint.complete_marker: 'a/b' must be a plain file name (letters, digits, "
     ". _ - +) that the program writes inside a checkpoint once it is complete"),
    ("checkpoint pattern", BASE + "checkpoint:\n  dir: /ck\n  pattern: 'a b/$x'\n"
     "  complete_marker: C\n  resume: -r {checkpoint}\n",
     "r.yaml:8: checkpoint.pattern: 'a b/$x' must be a file-name glob made of letters, digits, "
     ". _ - + and * ? [ ], e.g. step_*"),
    ("restarts negative", BASE + "requeue:\n  max_restarts: -1\n",
     "r.yaml:7: requeue.max_restarts: must be between 0 and 1000, got -1"),
    ("signal name", BASE + "signal:\n  name: KILL\n",
     "r.yaml:7: signal.name: must be one of USR1, USR2, got 'KILL'"),
    ("signal lead", BASE + "signal:\n  lead_seconds: 0\n",
     "r.yaml:7: signal.lead_seconds: must be between 1 and 65535, got 0"),
    ("torchrun section on srun", BASE + "torchrun:\n  port_base: 1\n",
     "r.yaml:6: torchrun: only applies to launcher: torchrun or ft_launcher (launcher is "
     "srun): remove this section"),
    ("elastic on srun", BASE + "failover:\n  elastic: true\n",
     "r.yaml:7: failover.elastic: going on with fewer nodes needs a launcher whose ranks meet "
     "again by rendezvous (torchrun or ft_launcher; launcher is srun): remove it or use "
     "launcher: torchrun"),
    ("min_nodes without elastic", BASE + "failover:\n  min_nodes: 1\n",
     "r.yaml:7: failover.min_nodes: only applies with failover.elastic: true: add it or "
     "remove min_nodes"),
    ("min_nodes above nodes", BASE.replace("launcher: srun", "launcher: torchrun")
     + "failover:\n  elastic: true\n  min_nodes: 9\n",
     "r.yaml:8: failover.min_nodes: 9 is more than nodes (2): give at most 2"),
    ("mpi on torchrun", BASE.replace("launcher: srun", "launcher: torchrun") + "mpi: pmix\n",
     "r.yaml:6: mpi: selects srun's --mpi and only applies to launcher: srun (launcher is "
     "torchrun): remove it"),
    ("python tag", BASE + "account: !!python/object:os.system x\n",
     "r.yaml:6: account: unsupported YAML tag tag:yaml.org,2002:python/object:os.system: "
     "write a plain value without a '!!' tag"),
]


@pytest.mark.parametrize("text,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_recipe_message(text: str, message: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("r.yaml").write_text(text)
    with pytest.raises(SquallError) as info:
        load_recipe("r.yaml")
    assert str(info.value) == message


def test_unreadable_and_non_utf8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SquallError) as info:
        load_recipe("missing.yaml")
    assert str(info.value) == ("cannot read recipe missing.yaml: No such file or directory: "
                               "check the path")
    Path("r.yaml").write_bytes(b"name: \xff\n")
    with pytest.raises(SquallError) as info:
        load_recipe("r.yaml")
    assert str(info.value) == "r.yaml:1: recipe: not UTF-8 text (byte 6): save the file as UTF-8"


def test_defaults_and_full_recipe(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(BASE)
    r = load_recipe(path)
    assert (r.target, r.tasks_per_node, r.gpus_per_node, r.exclusive) == ("generic", 1, 0, False)
    assert (r.max_restarts, r.signal, r.forward_signal, r.signal_lead) == (3, "USR1", "USR1", 120)
    assert r.container is None and r.checkpoint is None
    path.write_text(textwrap.dedent("""\
        name: full
        target: hyperpod
        nodes: 4
        gpus_per_node: 8
        cpus_per_task: 12
        partition: gpu
        account: ml
        qos: high
        time: 10:00:00
        exclusive: true
        log_dir: /fsx/logs/
        environment: {A: "1", B: x y, C: }
        container:
          image: /fsx/i.sqsh
          mounts: [/fsx:/fsx, /data:/data:ro]
          workdir: /w
          efa: require
          mount_home: false
        launcher: torchrun
        command: python train.py --lr 3e-4
        torchrun: {port_base: 31000}
        checkpoint:
          dir: /fsx/ck/
          pattern: step_*
          complete_marker: .done
          newest_by: mtime
          resume: [--resume, "{checkpoint}"]
        requeue: {max_restarts: 0}
        signal: {name: USR2, forward: INT, lead_seconds: 600}
        """))
    r = load_recipe(path)
    assert r.time == "10:00:00"  # YAML 1.1 would read 36000: the text is kept as written
    assert r.tasks_per_node == 8  # torchrun: one worker per GPU by default
    assert r.log_dir == "/fsx/logs"
    assert r.environment == (("A", "1"), ("B", "x y"), ("C", ""))
    assert r.command == ("python", "train.py", "--lr", "3e-4")
    assert r.container == Container(image="/fsx/i.sqsh", mounts=("/fsx:/fsx", "/data:/data:ro"),
                                    workdir="/w", efa="require", mount_home=False)
    assert r.checkpoint == Checkpoint(dir="/fsx/ck", resume=("--resume", "{checkpoint}"),
                                      complete_marker=".done", pattern="step_*",
                                      newest_by="mtime")
    assert (r.max_restarts, r.signal, r.forward_signal, r.signal_lead) == (0, "USR2", "INT", 600)
    assert r.rdzv_port_base == 31000 and r.forward_signal == "INT"
