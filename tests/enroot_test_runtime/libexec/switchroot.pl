#!/usr/bin/perl
# squall's Enroot TEST DOUBLE: the last step of `enroot start`.
#
# Usage: switchroot.pl ARCH ROOTFS ENVFILE KEEPCAPS CMD [ARG...]
#
# pivot_root needs one process that switches root, detaches the old root, drops
# capabilities and execs the container command: once the old root is gone no host
# binary can run any more. perl-base is Essential on Debian and starts in ~1 ms,
# and its syscall() reaches pivot_root, umount2, prctl and capset directly.
# It execs in place, so the container's main process keeps the PID of `enroot start`.
use strict;
use warnings;

my %NR = (
    x86_64  => { pivot_root => 155, umount2 => 166, prctl => 157, capset => 126 },
    aarch64 => { pivot_root => 41,  umount2 => 39,  prctl => 167, capset => 91 },
);
my ($arch, $rootfs, $envfile, $keepcaps, @cmd) = @ARGV;

sub fail { print STDERR "[ERROR] $_[0]\n"; exit 1; }

my $nr = $NR{$arch // ''} or fail("switchroot: unsupported architecture '" . ($arch // '') . "'");
@cmd or fail('switchroot: no command to run in the container');

# Read the environment before the host filesystem disappears; the last value wins.
my %env;
open(my $fh, '<', $envfile) or fail("cannot read the container environment $envfile: $!");
while (my $line = <$fh>) {
    chomp $line;
    next unless $line =~ /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s;
    next if $1 =~ /^ENROOT_/;
    $env{$1} = $2;
}
close $fh;

my $last_cap = 40;
if (open(my $cf, '<', '/proc/sys/kernel/cap_last_cap')) { $last_cap = int(<$cf> // 40); close $cf; }

chdir($rootfs) or fail("cannot enter the root filesystem $rootfs: $!");
# pivot_root(".", ".") stacks the old root on top of the new one; detaching "." then
# removes it, so tasks that setns() into this mount namespace land in the container.
my ($new, $old) = ('.', '.');   # syscall() wants writable scalars
syscall($nr->{pivot_root}, $new, $old) == 0 or fail("pivot_root into $rootfs failed: $!");
syscall($nr->{umount2}, $old, 2) == 0 or fail("cannot detach the host root filesystem: $!");  # MNT_DETACH
chdir('/') or fail("chdir / in the container failed: $!");

if (!$keepcaps) {
    for my $cap (0 .. $last_cap) { syscall($nr->{prctl}, 24, $cap, 0, 0, 0); }   # PR_CAPBSET_DROP
    syscall($nr->{prctl}, 47, 4, 0, 0, 0);                                       # PR_CAP_AMBIENT_CLEAR_ALL
    syscall($nr->{prctl}, 38, 1, 0, 0, 0) == 0 or fail("cannot set no_new_privs: $!");
    my $hdr  = pack('Li', 0x20080522, 0);                                       # _LINUX_CAPABILITY_VERSION_3
    my $data = pack('L6', 0, 0, 0, 0, 0, 0);
    syscall($nr->{capset}, $hdr, $data) == 0 or fail("cannot drop capabilities: $!");
}

%ENV = %env;
{ no warnings 'exec'; exec { $cmd[0] } @cmd; }
print STDERR "[ERROR] cannot run '$cmd[0]' in the container: $!\n";
exit 127;
