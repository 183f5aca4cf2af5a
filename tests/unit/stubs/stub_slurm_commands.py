#!/usr/bin/env python3
"""TEST STUB, not Slurm: stands in for srun, scontrol, scancel and mpirun when a unit test
executes a generated sbatch script under bash without a cluster.

Linked into a temporary bin directory under each command's name. Every call appends one
JSON line {"cmd": name, "argv": [...]} to $STUB_LOG, so a test can check that each recipe
value arrived byte-exact as one argv element (plus "env": the variables named in
$STUB_ENV_NAMES, as the command saw them). Behaviour per command:

- srun / mpirun: write the pid to $STUB_DIR/step.pid; with STUB_STEP=wait, sleep until
  SIGUSR1/SIGTERM arrives and exit 128 + signal (as a program that checkpoints on the
  signal does); otherwise exit $STUB_STEP_RC (default 0).
- scontrol show hostnames LIST: print the hosts in $STUB_HOSTS (space separated).
- scontrol requeue ID: record only.
- scancel --signal=SIG ID: deliver SIG to the pid in $STUB_DIR/step.pid (what slurmstepd
  does for the job's steps).

The real behaviour of these commands is tested on the mini cluster
(tests/integration/test_mksbatch_cluster.py).
"""

import json
import os
import signal
import sys
import time


def record(name: str) -> None:
    with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as fh:
        entry = {"cmd": name, "argv": sys.argv[1:]}
        if os.environ.get("STUB_ENV_NAMES"):
            entry["env"] = {k: os.environ.get(k) for k in os.environ["STUB_ENV_NAMES"].split()}
        fh.write(json.dumps(entry) + "\n")


def step() -> int:
    with open(os.path.join(os.environ["STUB_DIR"], "step.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    if os.environ.get("STUB_STEP") != "wait":
        return int(os.environ.get("STUB_STEP_RC", "0"))
    got: list[int] = []
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: got.append(signum))
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    return 128 + got[0] if got else 99


def main() -> int:
    name = os.path.basename(sys.argv[0])
    record(name)
    args = sys.argv[1:]
    if name in ("srun", "mpirun"):
        return step()
    if name == "scontrol" and args[:2] == ["show", "hostnames"]:
        print("\n".join(os.environ.get("STUB_HOSTS", "node1").split()))
        return 0
    if name == "scontrol" and args[:1] == ["requeue"]:
        return 0
    if name == "scancel":
        sig = next(a.split("=", 1)[1] for a in args if a.startswith("--signal="))
        with open(os.path.join(os.environ["STUB_DIR"], "step.pid")) as fh:
            os.kill(int(fh.read()), getattr(signal, "SIG" + sig))
        return 0
    print(f"stub_slurm_commands: unexpected call {name} {args}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
