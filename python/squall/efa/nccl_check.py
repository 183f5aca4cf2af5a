"""Which transport NCCL chose, per host and rank, from NCCL_DEBUG=INFO output.

Reads the documented line format ``HOST:PID:TID [GPU] NCCL INFO message`` (an
``srun --label`` prefix such as ``3: `` and other text before it are tolerated),
from many ranks mixed in any order. One NCCL process is one (host, pid) pair;
its rank comes from the ``comm ... rank R nranks N`` init line when present.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

LINE = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<pid>\d+):(?P<tid>\d+) "
                  r"\[(?P<gpu>\d+)\] NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$")
RANK = re.compile(r"\brank (?P<rank>\d+) nranks (?P<nranks>\d+)\b")
# "Using network X"; newer NCCL also logs "Assigned NET plugin X to comm"
USING = re.compile(r"^(?:Using network (?P<net>.+?)|Assigned NET plugin (?P<net2>.+?) to comm)"
                   r"\s*$")
CHANNEL = re.compile(r"\bvia NET/(?P<net>[^/]+)/\d+(?P<gdr>/GDRDMA)?")
OFI_INIT = re.compile(r"NET/OFI Initializing aws-ofi-nccl (?P<version>\S+)")
PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<prov>[\w-]+)"
                      r"(?:, fabric is [\w-]+)? \(found (?P<nics>\d+) nics?\)")

EFA_NETS = ("Libfabric", "AWS Libfabric")

# Likely causes, most specific first: the first that matches a process's lines wins.
CAUSES = (
    ("plugin not found",
     re.compile(r"NET/Plugin ?: (Plugin load .*returned|No plugin found|Could not find)"),
     "aws-ofi-nccl was not loaded: put its lib directory on LD_LIBRARY_PATH and set "
     "NCCL_NET_PLUGIN to its name (libnccl-net-ofi.so -> ofi)"),
    ("no device",
     re.compile(r"NET/OFI .*fi_getinfo\(\) call failed|NET/OFI .*[Nn]o (EFA )?devices? found"),
     "libfabric found no EFA device: /dev/infiniband not visible in the container, or "
     "no EFA interface on the instance"),
    ("init failed",
     re.compile(r"NET/OFI .*initialization failed|NET/OFI .*[Ff]ailed to initialize"),
     "aws-ofi-nccl failed to initialise: check libfabric's version and memlock (ulimit -l)"),
    ("no device",
     re.compile(r"NET/IB ?: No device found"),
     "no RDMA device seen by NCCL: /dev/infiniband not visible, or no EFA on the node"),
)


@dataclass
class Process:
    """One NCCL process (host, pid) and what its lines say."""

    host: str
    pid: int
    first_line: int
    gpu: int | None = None
    rank: int | None = None
    nranks: int | None = None
    network: str | None = None          # from "Using network X"
    channel_nets: set[str] = field(default_factory=set)
    gdr_channels: int = 0
    plain_channels: int = 0
    plugin_version: str | None = None
    provider: str | None = None
    nics: int | None = None
    cause: str | None = None
    cause_line: str | None = None
    fix: str | None = None
    socket_line: int | None = None  # where the log first shows this process on sockets
    cause_index: int = len(CAUSES)  # position in CAUSES of the cause kept (lower wins)

    @property
    def transport(self) -> str:
        """efa, socket, ib, or unknown (no NET lines: single node or no INIT,NET)."""
        net = self.network
        if net is None and self.channel_nets:
            net = sorted(self.channel_nets)[0]
        if net is None:
            return "unknown"
        if net in EFA_NETS:
            return "efa"
        if net == "Socket":
            return "socket"
        if net == "IB":
            return "ib"
        return net.lower()

    @property
    def gdr(self) -> bool | None:
        """GPUDirect RDMA on EFA: True/False from the channel lines, None unknown."""
        if self.transport != "efa" or not (self.gdr_channels or self.plain_channels):
            return None
        return self.gdr_channels > 0

    @property
    def fell_back(self) -> bool:
        return self.transport == "socket"

    def describe(self) -> str:
        if self.transport == "efa":
            detail = {True: "EFA with GPUDirect RDMA", False: "EFA without GPUDirect RDMA",
                      None: "EFA"}[self.gdr]
            extra = []
            if self.nics is not None:
                extra.append(f"{self.nics} nics")
            if self.plugin_version:
                extra.append(f"aws-ofi-nccl {self.plugin_version}")
            return detail + (f" ({', '.join(extra)})" if extra else "")
        if self.transport == "socket":
            return f"TCP sockets: {self.cause or 'cause not in the log'}"
        if self.transport == "unknown":
            return "no network chosen in the log"
        return self.transport

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("channel_nets")
        d.pop("gdr_channels")
        d.pop("plain_channels")
        d.pop("cause_index")
        d.pop("socket_line")
        d.update(transport=self.transport, gdr=self.gdr, fallback=self.fell_back)
        return d


@dataclass
class Report:
    processes: list[Process]
    nccl_lines: int

    @property
    def fallbacks(self) -> list[Process]:
        return sorted((p for p in self.processes if p.fell_back),
                      key=lambda p: (p.socket_line if p.socket_line is not None
                                     else p.first_line))

    @property
    def ok(self) -> bool:
        return self.nccl_lines > 0 and not self.fallbacks

    def to_json(self) -> dict[str, object]:
        first = self.fallbacks[0] if self.fallbacks else None
        return {
            "ok": self.ok,
            "nccl_lines": self.nccl_lines,
            "processes": [p.to_json() for p in self.sorted()],
            "first_fallback": None if first is None else {
                "host": first.host, "rank": first.rank, "pid": first.pid,
                "cause": first.cause, "fix": first.fix, "evidence": first.cause_line},
        }

    def sorted(self) -> list[Process]:
        return sorted(self.processes, key=lambda p: (p.host, p.rank if p.rank is not None
                                                     else 1 << 30, p.pid))


def parse(lines: Iterable[str]) -> Report:
    """Group NCCL lines by process and read what each says about the network."""
    procs: dict[tuple[str, int], Process] = {}
    count = 0
    for n, raw in enumerate(lines):
        m = LINE.search(raw.rstrip("\r\n"))
        if not m:
            continue
        count += 1
        key = (m["host"], int(m["pid"]))
        p = procs.get(key)
        if p is None:
            p = procs[key] = Process(host=m["host"], pid=key[1], first_line=n)
        if p.gpu is None:
            p.gpu = int(m["gpu"])
        msg = m["msg"]
        if (r := RANK.search(msg)) and p.rank is None:
            p.rank, p.nranks = int(r["rank"]), int(r["nranks"])
        if u := USING.match(msg):
            p.network = u["net"] or u["net2"]
            if p.network == "Socket" and p.socket_line is None:
                p.socket_line = n
        for c in CHANNEL.finditer(msg):
            p.channel_nets.add(c["net"])
            if c["net"] == "Socket" and p.socket_line is None:
                p.socket_line = n
            if c["gdr"]:
                p.gdr_channels += 1
            else:
                p.plain_channels += 1
        if v := OFI_INIT.search(msg):
            p.plugin_version = v["version"]
        if pr := PROVIDER.search(msg):
            p.provider, p.nics = pr["prov"], int(pr["nics"])
        for i, (cause, pattern, fix) in enumerate(CAUSES):
            if not pattern.search(msg):
                continue
            if i < p.cause_index:
                p.cause, p.fix, p.cause_line, p.cause_index = cause, fix, msg.strip(), i
            break
    return Report(processes=list(procs.values()), nccl_lines=count)


def table(report: Report) -> str:
    rows = [("HOST", "RANK", "PID", "GPU", "TRANSPORT")]
    for p in report.sorted():
        rank = "?" if p.rank is None else (f"{p.rank}/{p.nranks}" if p.nranks else str(p.rank))
        rows.append((p.host, rank, str(p.pid), "?" if p.gpu is None else str(p.gpu),
                     p.describe()))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True))
                     + "  " + r[4] for r in rows)


def verdict(report: Report) -> str | None:
    """The one line naming the first host that fell back, or None when none did."""
    if report.nccl_lines == 0:
        return ("no NCCL INFO lines found: run the job with NCCL_DEBUG=INFO "
                "NCCL_DEBUG_SUBSYS=INIT,NET (srun --container-nccl-debug=INFO)")
    if not report.fallbacks:
        return None
    first = report.fallbacks[0]
    rank = f" (rank {first.rank})" if first.rank is not None else f" (pid {first.pid})"
    n = len(report.fallbacks)
    others = f"; {n - 1} more process(es) fell back" if n > 1 else ""
    cause = first.cause or "cause not in the log"
    fix = f": {first.fix}" if first.fix else ""
    return f"{first.host}{rank} fell back to TCP sockets: {cause}{fix}{others}"
