# squall's Enroot TEST DOUBLE: the few Linux system calls its perl helpers make directly,
# with the numbers of the two architectures the test nodes run on.
use strict;

our %NR = (
    x86_64  => { mount => 165, umount2 => 166, pivot_root => 155, prctl => 157, capset => 126 },
    aarch64 => { mount => 40,  umount2 => 39,  pivot_root => 41,  prctl => 167, capset => 91 },
);
our %MS = (RDONLY => 1, NOSUID => 2, NODEV => 4, REMOUNT => 32, BIND => 4096, REC => 16384);

sub fail { print STDERR "[ERROR] $_[0]\n"; exit 1; }

sub syscalls_for {
    my ($arch) = @_;
    return $NR{$arch // ''} // fail("unsupported architecture '" . ($arch // '') . "' (x86_64 and aarch64 only)");
}

# sys_mount(NR, SRC, TARGET, TYPE, FLAGS, DATA): undef SRC/TYPE/DATA pass NULL.
sub sys_mount {
    my ($nr, $src, $tgt, $type, $flags, $data) = @_;
    # syscall() passes numbers as integers (0 = NULL) and strings as pointers to copies.
    my @args = map { defined $_ ? "$_" : 0 } ($src, $tgt, $type);
    return syscall($nr->{mount}, $args[0], $args[1], $args[2], $flags, defined $data ? "$data" : 0) == 0;
}

1;
