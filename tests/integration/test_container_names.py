"""Node names resolve inside containers on the mini cluster, as Enroot gives it (issue 20).

Enroot's default ``mounts.d/20-config.fstab`` binds the host's ``/etc/hosts``,
``/etc/hostname``, ``/etc/resolv.conf`` (and ``/etc/machine-id`` when present) read-only into
every container; the nodes' Enroot installs that file. Without it a rank cannot
resolve another node's name and a torchrun rendezvous by host name cannot work. The
containers share the node's network namespace (Enroot makes none), so a listener in a
container on node2 is reachable by name from a container on node1.
"""

from __future__ import annotations

import random
import shlex

import pytest

from .cluster import Cluster
from .images import IMAGE_DIR, build_image

# A distribution image has getent and an /etc/nsswitch.conf ("hosts: files dns"); the base
# test image has neither. Perl (perl-base, a few MB) serves as the TCP listener: the image
# has no Python and bash cannot listen.
NAMES_IMAGE_VERSION = "names-v1"
AUGMENT = r"""#!/bin/bash
set -euo pipefail
base=$1 out=$2 version=$3
tmp=$(mktemp -d /tmp/squall-names.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
unsquashfs -no-progress -quiet -d "$root" "$base" >/dev/null
for b in getent perl; do
    p=$(type -P "$b")
    cp -L "$p" "$root/usr/bin/$b"
    ldd "$p" | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' |
        while read -r lib; do
            [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
        done
done
# perl-base's modules (Socket among them), wherever this perl looks for them.
perl_base=$(perl -e 'print((grep { m{/perl-base$} && -d } @INC)[0] // "")')
[ -n "$perl_base" ] || { echo "no perl-base directory in perl's @INC" >&2; exit 1; }
mkdir -p "$root$(dirname "$perl_base")"
cp -a "$perl_base" "$root$perl_base"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
echo "$version" >"$root/etc/squall-names-image"
mksquashfs "$root" "$out.tmp.$$" -noappend -quiet -no-progress -comp lzo -noD -all-root >/dev/null
chmod 0644 "$out.tmp.$$"
chown 1000:1000 "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
"""

# Accepts one connection on PORT, answers "pong from HOST", prints what came and from where.
LISTENER = r"""
use Socket;
my ($port, $host) = @ARGV;
socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
setsockopt($s, SOL_SOCKET, SO_REUSEADDR, 1) or die "setsockopt: $!";
bind($s, pack_sockaddr_in($port, INADDR_ANY)) or die "bind: $!";
listen($s, 1) or die "listen: $!";
alarm 30;
my $peer = accept(my $c, $s) or die "accept: $!";
my (undef, $addr) = unpack_sockaddr_in($peer);
my $line = <$c>;
chomp $line;
select((select($c), $| = 1)[0]);
print $c "pong from $host\n";
close $c;
print "server got '$line' from ", inet_ntoa($addr), "\n";
"""


@pytest.fixture(scope="module")
def names_image(cluster: Cluster) -> str:
    base = build_image(cluster, f"{IMAGE_DIR}/names-base.sqsh", "squallnames")
    out = f"{IMAGE_DIR}/names.sqsh"
    have = cluster.run(f"unsquashfs -cat {out} etc/squall-names-image 2>/dev/null",
                       node="login", user="root", check=False, timeout=60)
    if have.out.strip() != NAMES_IMAGE_VERSION:
        script = f"{IMAGE_DIR}/augment-names.sh"
        cluster.put(script, AUGMENT, mode=0o755)
        cluster.run(f"bash {script} {base} {out} {NAMES_IMAGE_VERSION}", node="login",
                    user="root", timeout=600)
    return out


def srun(cluster: Cluster, args: str, cmd: str, check: bool = True, timeout: float = 120):
    return cluster.run(f"srun {args} bash -c {shlex.quote(cmd)}", check=check, timeout=timeout)


def test_node_names_resolve_in_a_container_as_on_the_node(cluster: Cluster,
                                                          names_image: str) -> None:
    # Compared as sets of lines: Docker lists a node's own name twice in its /etc/hosts and
    # the node's /etc/host.conf ("multi on", which Enroot does not bind) prints both.
    on_node = cluster.run("getent hosts node2 node1 login", node="node1").out
    assert "node2" in on_node, on_node
    res = srun(cluster, f"-N1 -w node1 --container-image={names_image}",
               "grep -qx ID=squallnames /etc/os-release && echo in-image;"
               " getent hosts node2 node1 login")
    assert res.out.startswith("in-image\n"), res
    assert set(res.out.splitlines()[1:]) == set(on_node.splitlines()), res


def test_host_files_are_the_node_s_and_read_only(cluster: Cluster, names_image: str) -> None:
    files = ["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"]
    if cluster.run("test -e /etc/machine-id", node="node1", check=False).rc == 0:
        files.append("/etc/machine-id")
    want = "".join(cluster.run(f"cat {f}", node="node1").out + "refused\n" for f in files)
    probe = "".join(f"cat {f}; (echo x >> {f}) 2>/dev/null && echo written || echo refused;"
                    for f in files)
    res = srun(cluster, f"-N1 -w node1 --container-image={names_image}", probe)
    assert res.out == want, res
    assert cluster.run("hostname", node="node1").out == "node1\n"


def test_tcp_by_name_from_a_container_on_node1_to_one_on_node2(cluster: Cluster,
                                                               names_image: str) -> None:
    port = random.randint(20000, 39999)
    node1_ip = cluster.run("getent hosts node1", node="node1").out.split()[0]
    # Task 0 on node1 connects by name (bash's /dev/tcp resolves with getaddrinfo, as a
    # rendezvous client does), task 1 on node2 listens; each in its node's container.
    cmd = (
        f"port={port};"
        ' if [ "$SLURM_PROCID" = 1 ]; then'
        f"   exec perl -e {shlex.quote(LISTENER)} $port $(hostname);"
        " fi;"
        " for ((i = 0; i < 200; i++)); do"
        "   { exec 3<>/dev/tcp/node2/$port; } 2>/dev/null && break; sleep 0.1;"
        " done;"
        ' echo "ping from $(hostname)" >&3; read -r reply <&3; echo "client got \'$reply\'"')
    res = srun(cluster, f"-N2 -n2 -w node1,node2 --ntasks-per-node=1 "
               f"--container-image={names_image} --label", cmd)
    lines = sorted(res.out.splitlines())
    assert lines == ["0: client got 'pong from node2'",
                     f"1: server got 'ping from node1' from {node1_ip}"], res
