#!/usr/bin/perl
# squall's Enroot TEST DOUBLE: the fixed mounts of `enroot start` in one process. A fork
# and exec of mount(8) costs 2-10 ms on a loaded test node and the start path needs about
# ten, so the fixed ones are made here with mount(2) directly.
#
# Usage: mounts.pl ARCH OP [ARG...] [OP [ARG...]]...
#   tmpfs DIR                       a tmpfs (mode 0700) on DIR
#   mkdir DIR                       create DIR unless it exists
#   overlay LOWER UPPER WORK DIR    kernel overlayfs, nosuid,nodev (exit 2 if refused)
#   rbind SRC DIR                   recursive bind mount, creating DIR if missing
use strict;   # (no "use warnings": loading it costs ~2 ms on every start)
our %MS;
require((__FILE__ =~ s{[^/]*$}{}r || './') . 'syscalls.pl');

my $nr = syscalls_for(shift @ARGV);
my %ARITY = (tmpfs => 1, mkdir => 1, overlay => 4, rbind => 2);

while (@ARGV) {
    my $op = shift @ARGV;
    my $n = $ARITY{$op} // fail("mounts.pl: unknown operation '$op'");
    @ARGV >= $n or fail("mounts.pl: '$op' needs $n arguments");
    my @a = splice(@ARGV, 0, $n);
    if ($op eq 'tmpfs') {
        sys_mount($nr, 'enroot-runtime', $a[0], 'tmpfs', 0, 'mode=0700')
            or fail("cannot mount a tmpfs on $a[0]: $!");
    } elsif ($op eq 'mkdir') {
        -d $a[0] or mkdir($a[0]) or fail("cannot create $a[0]: $!");
    } elsif ($op eq 'overlay') {
        my $data = "lowerdir=$a[0],upperdir=$a[1],workdir=$a[2],userxattr";
        sys_mount($nr, 'overlay', $a[3], 'overlay', $MS{NOSUID} | $MS{NODEV}, $data) or exit 2;
    } elsif ($op eq 'rbind') {
        -d $a[1] or mkdir($a[1]) or fail("cannot create mount point $a[1]: $!");
        sys_mount($nr, $a[0], $a[1], undef, $MS{BIND} | $MS{REC}, undef)
            or fail("cannot bind $a[0] on $a[1]: $!");
    }
}
exit 0;
