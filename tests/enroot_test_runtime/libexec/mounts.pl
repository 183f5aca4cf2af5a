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
#   bind SRC DIR REC OPTS           bind mount (recursive if REC is 1) on an existing DIR,
#                                   then OPTS: per-mount flags (ro nosuid nodev noexec
#                                   noatime nodiratime relatime strictatime; rw suid dev exec
#                                   atime diratime norelatime nostrictatime are no-ops, as a
#                                   bind keeps its source's flags) and propagation ([r]private [r]slave
#                                   [r]shared [r]unbindable); "-" for none. Flags the host
#                                   locked are kept, so this works where mount(8) 2.38 fails.
#   entry LABEL NOFAIL SRC DIR REC OPTS
#                                   the same bind for an fstab entry (fstab.sh queues them):
#                                   on failure "[ERROR] LABEL: why", or with NOFAIL 1 the
#                                   entry is skipped, as Enroot's nofail does.
use strict;   # (no "use warnings": loading it costs ~2 ms on every start)
our %MS;
require((__FILE__ =~ s{[^/]*$}{}r || './') . 'syscalls.pl');

my $nr = syscalls_for(shift @ARGV);
my %ARITY = (tmpfs => 1, mkdir => 1, overlay => 4, rbind => 2, bind => 4, entry => 6);
my %FLAG = (ro => 'RDONLY', nosuid => 'NOSUID', nodev => 'NODEV', noexec => 'NOEXEC',
            noatime => 'NOATIME', nodiratime => 'NODIRATIME', relatime => 'RELATIME',
            strictatime => 'STRICTATIME', rw => '', suid => '', dev => '', exec => '',
            atime => '', diratime => '', norelatime => '', nostrictatime => '');
my %PROPAGATION = (private => 'PRIVATE', slave => 'SLAVE', shared => 'SHARED',
                   unbindable => 'UNBINDABLE');

# bind_mount(SRC, DST, REC, OPTS): undef when done, else why not.
sub bind_mount {
    my ($src, $dst, $rec, $opts) = @_;
    my ($flags, @prop) = (0);
    for my $o (split /,/, $opts eq '-' ? '' : $opts) {
        if (exists $FLAG{$o}) {
            $flags |= $MS{$FLAG{$o}} if $FLAG{$o};
        } elsif ($o =~ /^(r?)(private|slave|shared|unbindable)$/) {
            push @prop, $MS{$PROPAGATION{$2}} | ($1 ? $MS{REC} : 0);
        } else {
            return "unsupported option '$o' for a bind mount of $src: use ro, nosuid, nodev, noexec, "
                 . "noatime, relatime or a propagation such as rprivate";
        }
    }
    sys_mount($nr, $src, $dst, undef, $MS{BIND} | ($rec ? $MS{REC} : 0), undef)
        or return "cannot bind $src on $dst: $!";
    !$flags or remount_bind($nr, $dst, $flags) or return "cannot set '$opts' on the bind of $src: $!";
    for my $p (@prop) {
        sys_mount($nr, undef, $dst, undef, $p, undef) or return "cannot set the propagation of $dst: $!";
    }
    return undef;
}

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
    } elsif ($op eq 'bind') {
        my $why = bind_mount(@a);
        fail($why) if defined $why;
    } elsif ($op eq 'entry') {
        my ($label, $nofail, @bind) = @a;
        my $why = bind_mount(@bind);
        fail("$label: $why") if defined $why && !$nofail;
    } elsif ($op eq 'rbind') {
        -d $a[1] or mkdir($a[1]) or fail("cannot create mount point $a[1]: $!");
        sys_mount($nr, $a[0], $a[1], undef, $MS{BIND} | $MS{REC}, undef)
            or fail("cannot bind $a[0] on $a[1]: $!");
    }
}
exit 0;
