"""File operations that follow no link and never block, for directories others write.

The rule (docs/security.md): a directory is used only after it was opened with
``O_NOFOLLOW|O_DIRECTORY`` and checked (a directory, a trusted owner, sticky where
untrusted users may write), and so was every directory above it. In such a chain nobody
but its trusted owners can rename, replace or remove an entry, so a path below it names
the same directories for as long as the build runs; only the last component can be
someone else's, and every open of it here says ``O_NOFOLLOW`` (``O_EXCL`` to create,
``O_NONBLOCK`` so a FIFO or device answers at once) and checks what it got with
``fstat``. Modes and owners are set with ``fchmod``/``fchown`` on descriptors.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from squall.errors import SquallError
from squall.sqshbuild.trust import Trust, kind, who

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unsafe(Exception):
    """A path this process must not use; the message is a phrase naming it."""


def open_dir(path: Path | str, dir_fd: int | None = None) -> int:
    """A descriptor of the directory ``path`` (a link there is refused: ``ELOOP``)."""
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


_MAX_LINKS = 40


def walk(path: Path, links: Trust, dirs: Trust | None = None,
         make: tuple[int, tuple[int, int] | None] | None = None) -> tuple[int, Path]:
    """A descriptor of the directory ``path`` and the path it really is, reached one
    component at a time from ``/`` through descriptors. A symlink on the way is followed
    only when an owner in ``links`` made it (the admin's ``/fsx -> /mnt/lustre``);
    another user's link is :class:`Unsafe`, never followed. With ``dirs``, every
    directory on the way must pass :meth:`Trust.why_not_dir`. With ``make`` (mode,
    owner), missing directories are created with that mode (and, as root, owner)."""
    todo = list(Path(os.path.normpath(path.absolute())).parts[1:])
    real: list[str] = []
    fd = open_dir("/")
    hops = 0
    try:
        while todo:
            name = todo.pop(0)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if make is None:
                    raise
                nfd = make_new_dir(fd, name, make[0], make[1])
            else:
                if stat.S_ISLNK(st.st_mode):
                    here = Path("/", *real, name)
                    if not links.owner(st.st_uid) or hops >= _MAX_LINKS:
                        raise Unsafe(f"{here} is a symlink of {who(st.st_uid)}'s (only "
                                     "links of root, the builder or yours are followed)")
                    hops += 1
                    aim = os.readlink(name, dir_fd=fd)
                    if aim.startswith("/"):
                        os.close(fd)
                        fd, real = open_dir("/"), []
                    todo = list(Path(os.path.normpath(aim)).parts[1 if aim.startswith("/")
                                                                    else 0:]) + todo
                    continue
                if name == "..":
                    real = real[:-1]
                nfd = open_dir(name, dir_fd=fd)
            os.close(fd)
            fd = nfd
            if name != "..":
                real.append(name)
            if dirs is not None:
                why = dirs.why_not_dir(os.fstat(fd))
                if why:
                    raise Unsafe(f"{Path('/', *real)} {why}")
    except BaseException:
        os.close(fd)
        raise
    return fd, Path("/", *real)


def make_new_dir(parent_fd: int, name: str, mode: int,
                 owner: tuple[int, int] | None) -> int:
    """The directory ``name`` below ``parent_fd``: made with exactly ``mode`` (and, as
    root, ``owner``), or one already there opened as it is (the caller checks it)."""
    fd, created = mkdir_open(parent_fd, name)
    if created:
        try:
            set_new_dir(fd, mode, owner)
        except BaseException:
            os.close(fd)
            raise
    return fd


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """``lstat`` of ``name`` below ``dir_fd``, or None when nothing is there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def lstat(path: Path) -> os.stat_result | None:
    """``os.lstat``, or None when nothing is there (a missing name, or a file where a
    directory of the path should be)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def open_read(path: Path, trust: Trust | None = None) -> int:
    """Open a regular file for reading without following a link or blocking on a FIFO;
    with ``trust``, only one :meth:`Trust.why_not_file` accepts. Raises :class:`Unsafe`
    (what it is instead) or ``OSError`` (``FileNotFoundError`` when absent)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Unsafe(f"{path} is a symlink") from None
        raise
    try:
        st = os.fstat(fd)
        why = trust.why_not_file(st) if trust is not None else (
            "" if stat.S_ISREG(st.st_mode) else f"is not a regular file ({kind(st.st_mode)})")
        if why:
            raise Unsafe(f"{path} {why}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(path: Path, trust: Trust | None = None, limit: int = 1 << 20) -> bytes:
    """The bytes of a small regular file (see :func:`open_read`); more than ``limit``
    bytes is :class:`Unsafe`."""
    fd = open_read(path, trust)
    try:
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return data
            data += chunk
        raise Unsafe(f"{path} is larger than {limit} bytes")
    finally:
        os.close(fd)


def create(path: Path, mode: int = 0o644) -> int:
    """Create a new file, ``mode`` whatever the umask; an existing name (anyone's link,
    file or FIFO) is ``FileExistsError``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_own(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int | None:
    """Open a regular file of this user's for writing (to append to a download); None when
    the name is someone else's or not a regular file, ``FileNotFoundError`` when absent."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EACCES, errno.EPERM, errno.ENXIO, errno.EISDIR,
                         errno.ETXTBSY):
            return None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd


def owned_by_me(path: Path) -> bool:
    """``path`` is absent or a regular file or directory of this user's (so replacing or
    removing it takes nothing of anyone else's)."""
    st = lstat(path)
    return st is None or (st.st_uid == os.geteuid()
                          and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)))


def unlink_own(path: Path) -> bool:
    """Remove ``path`` when it is this user's (or, for root, when it is root's); never
    another user's entry. True when removed."""
    st = lstat(path)
    if st is None or st.st_uid != os.geteuid() or stat.S_ISDIR(st.st_mode):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


# A shared file system's clients may see another node's making of the same directory half
# done. On GlusterFS (the scale cluster's /fsx), when a fresh cache's first jobs start on
# sixteen nodes at once, mkdir, open and fchmod answer ENOENT, ENODATA or EPERM for a moment
# (CI), for more than 4 s when some nodes' clocks are off (the skew tests). Those answers
# are tried again for about 20 s; any other, or the same one after that, is raised.
_SETTLING = frozenset({errno.ENOENT, errno.ENODATA, errno.EPERM, errno.ESTALE})
_SETTLE_WAITS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.5, 0.75, 1.0, 1.0) + (2.0,) * 7


def _settling(exc: OSError, attempt: int) -> bool:
    """True (after a short wait) when ``exc`` may be another client's mkdir not yet
    settled and ``attempt`` may be tried again."""
    if exc.errno not in _SETTLING or attempt >= len(_SETTLE_WAITS):
        return False
    time.sleep(_SETTLE_WAITS[attempt])
    return True


def mkdir_open(parent_fd: int, name: str) -> tuple[int, bool]:
    """The directory ``name`` below ``parent_fd``, made (0700) when missing, opened without
    following a link: (descriptor, created). A link, file or FIFO there is :class:`Unsafe`.
    Another client's mkdir of the same name, half done, is waited for (``_SETTLING``)."""
    created = False
    attempt = 0
    while True:
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            created = True
        except FileExistsError:
            pass
        except OSError as exc:
            if _settling(exc, attempt):
                attempt += 1
                continue
            raise
        try:
            return open_dir(name, dir_fd=parent_fd), created
        except OSError as exc:
            st = lstat_at(parent_fd, name)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise Unsafe(f"{name} is {kind(st.st_mode)}, not a directory") from None
            if not _settling(exc, attempt):
                raise
            attempt += 1


def set_new_dir(fd: int, mode: int, owner: tuple[int, int] | None) -> None:
    """Give a directory this process just made ``owner`` (as root) and exactly ``mode``,
    through its descriptor; a moment's EPERM while another client's mkdir of the same name
    settles is waited out (``_SETTLING``)."""
    attempt = 0
    while True:
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)  # after chown, which clears setgid
            return
        except OSError as exc:
            if not _settling(exc, attempt):
                raise
            attempt += 1


def make_dir_at(parent_fd: int, name: str, mode: int,
                owner: tuple[int, int] | None = None) -> tuple[int, bool]:
    """Open (creating when missing) the directory ``name`` below ``parent_fd``: the
    descriptor and whether it was created. A new directory, or an existing one this user
    owns, gets exactly ``mode`` (and, as root, ``owner``) through its descriptor."""
    fd, created = mkdir_open(parent_fd, name)
    try:
        st = os.fstat(fd)
        euid = os.geteuid()
        if created:
            set_new_dir(fd, mode, owner if euid == 0 else None)
        elif st.st_uid == euid:
            if euid == 0 and owner is not None and (st.st_uid, st.st_gid) != owner:
                os.fchown(fd, *owner)
            if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
                os.fchmod(fd, mode)  # after chown, which clears setgid
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def read_trusted(path: Path, what: str, limit: int, missing_ok: bool = False,
                 follow: bool = True) -> bytes | None:
    """A small regular file of root's or the caller's that no one else may write (anyone who
    could write it could change what the site trusts: its policy, its keys, its bounds);
    never waited on (a FIFO); a link followed only with ``follow``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise SquallError(f"{what} does not exist") from None
    except OSError as exc:
        raise SquallError(f"{what} cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SquallError(f"{what} is not a regular file")
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            raise SquallError(f"{what} may be written by others than root (owner uid "
                              f"{st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}): fix it "
                              f"with chown root {path}; chmod 0644 {path}")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SquallError(f"{what} is larger than {limit} bytes")
    return data
