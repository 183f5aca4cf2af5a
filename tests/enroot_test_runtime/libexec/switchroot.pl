#!/usr/bin/perl
# squall's Enroot TEST DOUBLE: the last step of `enroot start`.
#
# Usage: switchroot.pl ARCH ROOTFS ENVFILE READONLY KEEPCAPS CMD [ARG...]
#
# pivot_root needs one process that switches root, detaches the old root, drops
# capabilities and execs the container command: once the old root is gone no host
# binary can run any more. perl-base is Essential on Debian and starts in ~1 ms,
# and its syscall() reaches pivot_root, umount2, prctl and capset directly.
# It execs in place, so the container's main process keeps the PID of `enroot start`.
use strict;   # (no "use warnings": loading it costs ~2 ms on every start)
our %MS;
require((__FILE__ =~ s{[^/]*$}{}r || './') . 'syscalls.pl');

my ($arch, $rootfs, $envfile, $readonly, $keepcaps, @cmd) = @ARGV;
my $nr = syscalls_for($arch);
@cmd or fail('switchroot: no command to run in the container');

# Read the environment before the host filesystem disappears; the last value wins.
my %env;
open(my $fh, '<', $envfile) or fail("cannot read the container environment $envfile: $!");
while (my $line = <$fh>) {
    chomp $line;
    # Enroot's clean-up (see format_environ in environ.sh): leading blanks, comments and
    # ill-formed lines go, ENROOT_* keys go, one pair of surrounding quotes goes.
    $line =~ s/^\s+//;
    next unless $line =~ /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s;
    my ($key, $value) = ($1, $2);
    next if $key =~ /^ENROOT_/;
    $value = $1 if $value =~ /^["'](.*)["']\s*$/s;
    $env{$key} = $value;
}
close $fh;

my $last_cap = 40;
if (open(my $cf, '<', '/proc/sys/kernel/cap_last_cap')) { $last_cap = int(<$cf> // 40); close $cf; }

# Enroot's rootfs lock, bound read-only on itself once the container is configured (here:
# one perl process fewer than a mounts.pl run of its own, on every start).
my $lock = "$rootfs/.lock";
if (-f $lock) {
    sys_mount($nr, $lock, $lock, undef, $MS{BIND}, undef)
        and sys_mount($nr, undef, $lock, undef, $MS{PRIVATE}, undef)
        and remount_bind($nr, $lock, $MS{RDONLY} | $MS{NOSUID} | $MS{NODEV} | $MS{NOEXEC})
        or fail("cannot bind the rootfs lock $lock read-only: $!");
}
if ($readonly) {
    remount_bind($nr, $rootfs, $MS{RDONLY} | $MS{NOSUID} | $MS{NODEV})
        or fail("cannot make the root filesystem read-only: $!");
}
chdir($rootfs) or fail("cannot enter the root filesystem $rootfs: $!");
# pivot_root(".", ".") stacks the old root on top of the new one; detaching "." then
# removes it, so tasks that setns() into this mount namespace land in the container.
my ($new, $old) = ('.', '.');   # syscall() wants writable scalars
syscall($nr->{pivot_root}, $new, $old) == 0 or fail("pivot_root into $rootfs failed: $!");
syscall($nr->{umount2}, $old, 2) == 0 or fail("cannot detach the host root filesystem: $!");  # MNT_DETACH
chdir('/') or fail("chdir / in the container failed: $!");
my $root_flags = mount_flags($nr, '/') // 0;
my $source = $ENV{ENROOT_TEST_SOURCE} // $rootfs;
!($root_flags & $MS{NOEXEC}) or fail("the container's root filesystem $source is on a noexec mount: "
    . "keep ENROOT_DATA_PATH on a filesystem that allows executables");

if (!$keepcaps) {
    for my $cap (0 .. $last_cap) { syscall($nr->{prctl}, 24, $cap, 0, 0, 0); }   # PR_CAPBSET_DROP
    syscall($nr->{prctl}, 47, 4, 0, 0, 0);                                       # PR_CAP_AMBIENT_CLEAR_ALL
    syscall($nr->{prctl}, 38, 1, 0, 0, 0) == 0 or fail("cannot set no_new_privs: $!");
    my $hdr  = pack('Li', 0x20080522, 0);                                       # _LINUX_CAPABILITY_VERSION_3
    my $data = pack('L6', 0, 0, 0, 0, 0, 0);
    syscall($nr->{capset}, $hdr, $data) == 0 or fail("cannot drop capabilities: $!");
}

%ENV = %env;
exec { $cmd[0] } @cmd;
print STDERR "[ERROR] cannot run '$cmd[0]' in the container: $!\n";
exit 127;
