# squall's Enroot TEST DOUBLE: the few Linux system calls its perl helpers make directly,
# with the numbers of the two architectures the test nodes run on.
use strict;

our %NR = (
    x86_64  => { mount => 165, umount2 => 166, pivot_root => 155, prctl => 157, capset => 126,
                 statfs => 137 },
    aarch64 => { mount => 40,  umount2 => 39,  pivot_root => 41,  prctl => 167, capset => 91,
                 statfs => 43 },
);
our %MS = (RDONLY => 1, NOSUID => 2, NODEV => 4, NOEXEC => 8, REMOUNT => 32, NOATIME => 1024,
           NODIRATIME => 2048, BIND => 4096, REC => 16384, UNBINDABLE => 1 << 17,
           PRIVATE => 1 << 18, SLAVE => 1 << 19, SHARED => 1 << 20, RELATIME => 1 << 21,
           STRICTATIME => 1 << 24);

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

# mount_flags(NR, PATH): the per-mount flags of the mount at PATH, as MS_* bits. A bind
# remount must repeat them: in a user namespace the flags inherited from the host are
# locked, and a remount that drops one (noexec, say) fails with EPERM.
sub mount_flags {
    my ($nr, $path) = @_;
    my ($p, $buf) = ("$path", "\0" x 256);
    syscall($nr->{statfs}, $p, $buf) == 0 or return undef;
    my $st = unpack('Q', substr($buf, 80, 8));   # f_flags: 11th word of struct statfs (64-bit)
    my $ms = 0;
    $ms |= $MS{RDONLY} if $st & 1;
    $ms |= $MS{NOSUID} if $st & 2;
    $ms |= $MS{NODEV} if $st & 4;
    $ms |= $MS{NOEXEC} if $st & 8;
    $ms |= $MS{NOATIME} if $st & 1024;
    $ms |= $MS{NODIRATIME} if $st & 2048;
    $ms |= ($st & 4096) ? $MS{RELATIME} : ($st & 1024) ? 0 : $MS{STRICTATIME};
    return $ms;
}

# remount_bind(NR, PATH, FLAGS): add FLAGS (MS_* bits) to the bind mount at PATH. An atime
# flag in FLAGS replaces the current one, unless the kernel refuses (the host locked it in
# the user namespace): then the current one stays, as atime is only a performance hint.
sub remount_bind {
    my ($nr, $path, $flags) = @_;
    my $cur = mount_flags($nr, $path) // return 0;
    my $atime = $MS{NOATIME} | $MS{NODIRATIME} | $MS{RELATIME} | $MS{STRICTATIME};
    my $base = $MS{REMOUNT} | $MS{BIND};
    if ($flags & $atime) {
        return 1 if sys_mount($nr, undef, $path, undef, $base | ($cur & ~$atime) | $flags, undef);
        $flags &= ~$atime;
    }
    return sys_mount($nr, undef, $path, undef, $base | $cur | $flags, undef);
}

1;
