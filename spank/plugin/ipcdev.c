/* ipcdev.c: see ipcdev.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ipcdev.h"
#include "mountapi.h"

#define MAX_KEEP 64
#define MAX_STACK 64     /* mounts stacked on the container's /dev, at most */

#ifndef UMOUNT_NOFOLLOW
#define UMOUNT_NOFOLLOW 0x8
#endif

/* Enroot's restricted /dev: these device nodes, bound from the node's. */
static const char *const basic[] = { "null", "zero", "full", "random", "urandom", "tty", NULL };
/* What the container had that its work needs: accelerators, fabric, huge pages, syslog. */
static const char *const extra_prefix[] = { "nvidia", "infiniband", "gdrdrv", "dri", "kfd",
					    "hugepages", "log", NULL };

struct keep {
	char name[64];
	int fd;          /* O_PATH on the node's /dev entry */
	int dir;
};

struct linux_dirent64 {
	unsigned long long d_ino;
	long long d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int wanted(const char *name)
{
	for (int i = 0; basic[i]; i++)
		if (strcmp(name, basic[i]) == 0)
			return 1;
	for (int i = 0; extra_prefix[i]; i++)
		if (starts_with(name, extra_prefix[i]))
			return 1;
	return 0;
}

/* "dev/NAME" into buf, without stdio (a fork of a threaded process). */
static void dev_path(char *buf, size_t len, const char *name)
{
	size_t n = strlen(name);

	if (n + 5 > len)
		n = len - 5;
	memcpy(buf, "dev/", 4);
	memcpy(buf + 4, name, n);
	buf[4 + n] = '\0';
}

/* "/proc/self/fd/N", to bind from a descriptor. */
static void fd_path(char *buf, int fd)
{
	char num[16];
	int k = 0;

	do {
		num[k++] = (char)('0' + fd % 10);
		fd /= 10;
	} while (fd > 0 && k < (int)sizeof(num));
	memcpy(buf, "/proc/self/fd/", 14);
	buf += 14;
	while (k > 0)
		*buf++ = num[--k];
	*buf = '\0';
}

/* The node's /dev entries to keep, held by O_PATH descriptors before /dev is covered. */
static int collect(struct keep *keep, int *n, int *pts)
{
	char buf[4096];
	int dfd = open("dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long got;

	*n = 0;
	*pts = -1;
	if (dfd < 0)
		return -1;
	while ((got = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < got;) {
			struct linux_dirent64 *e = (struct linux_dirent64 *)(buf + off);
			struct stat st;
			off += e->d_reclen;
			if (!wanted(e->d_name) || *n >= MAX_KEEP || strlen(e->d_name) >= 64)
				continue;
			keep[*n].fd = openat(dfd, e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
			if (keep[*n].fd < 0 || fstat(keep[*n].fd, &st) < 0 ||
			    !(S_ISCHR(st.st_mode) || S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode))) {
				if (keep[*n].fd >= 0)
					close(keep[*n].fd);
				continue;
			}
			keep[*n].dir = S_ISDIR(st.st_mode);
			memcpy(keep[*n].name, e->d_name, strlen(e->d_name) + 1);
			(*n)++;
		}
	}
	*pts = openat(dfd, "pts", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	return 0;
}

static int bind_from(int fd, const char *target, int dir)
{
	char src[32];
	int made;

	if (dir)
		made = mkdir(target, 0755);
	else
		made = open(target, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (made < 0 && errno != EEXIST)
		return -1;
	if (!dir && made >= 0)
		close(made);
	fd_path(src, fd);
	return mount(src, target, NULL, MS_BIND | (dir ? MS_REC : 0), NULL);
}

/* The new /dev, on top of the old one whose entries keep holds. */
static int build(struct keep *keep, int n, int pts, const char **what)
{
	static const char *const links[][2] = {
		{ "/proc/self/fd", "dev/fd" }, { "/proc/self/fd/0", "dev/stdin" },
		{ "/proc/self/fd/1", "dev/stdout" }, { "/proc/self/fd/2", "dev/stderr" },
		{ "pts/ptmx", "dev/ptmx" },
	};
	char target[80];

	*what = "mounting a tmpfs on /dev";
	if (mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755") < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		dev_path(target, sizeof(target), keep[i].name);
		*what = "binding a device into the new /dev";
		if (bind_from(keep[i].fd, target, keep[i].dir) < 0)
			return -1;
		close(keep[i].fd);
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) < 0 && errno != EEXIST)
			return (*what = "making the /dev links", -1);
	*what = "mounting a devpts instance on /dev/pts";
	if (mkdir("dev/pts", 0755) < 0 ||
	    (mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		   "newinstance,ptmxmode=0666,mode=620") < 0 &&
	     (pts < 0 || bind_from(pts, "dev/pts", 1) < 0)))
		return -1;
	*what = "mounting a fresh tmpfs on /dev/shm";
	if (mkdir("dev/shm", 01777) < 0 ||
	    mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777") < 0)
		return -1;
	*what = "mounting the IPC namespace's mqueue on /dev/mqueue";
	if (mkdir("dev/mqueue", 01777) < 0 ||
	    mount("mqueue", "dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return -1;
	return 0;
}

/* 1: path is a mount point (another mount than the root's); 0: not, or unknown (a kernel
 * before 5.8 or C library headers without it say no mount ID). */
static int mount_point(const char *path)
{
#ifdef STATX_MNT_ID
	struct statx a, b;

	if (statx(AT_FDCWD, ".", AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &a) < 0 ||
	    statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &b) < 0 ||
	    !(a.stx_mask & b.stx_mask & STATX_MNT_ID))
		return 0;
	return a.stx_mnt_id != b.stx_mnt_id;
#else
	(void)path;
	return 0;
#endif
}

/* Take the new /dev out (a detached copy, with everything mounted in it), detach every mount
 * on the container's /dev beneath it (the node's, as Enroot bound it, with its /dev/shm,
 * /dev/pts, /dev/mqueue, /dev/hugepages), then put the copy on the rootfs's own /dev
 * directory: nothing of the node's /dev is left below the new one. */
static int replace(const char **what)
{
	int copy, i;

	*what = "copying the new /dev (open_tree: Linux 5.2 or newer)";
	copy = (int)syscall(SYS_open_tree, AT_FDCWD, "dev", OPEN_TREE_CLONE | AT_RECURSIVE |
			    O_CLOEXEC);
	if (copy < 0)
		return -1;
	*what = "detaching the node's /dev";
	for (i = 0; i < MAX_STACK && umount2("dev", MNT_DETACH | UMOUNT_NOFOLLOW) == 0; i++)
		;
	/* EINVAL: dev is no mount point any more (or one that is locked: seen below). */
	if (i == MAX_STACK || errno != EINVAL || mount_point("dev")) {
		if (i == MAX_STACK || errno == EINVAL)
			errno = EBUSY;
		close(copy);
		return -1;
	}
	*what = "mounting the new /dev on the rootfs's /dev";
	if (syscall(SYS_move_mount, copy, "", AT_FDCWD, "dev", MOVE_MOUNT_F_EMPTY_PATH) < 0) {
		close(copy);
		return -1;
	}
	close(copy);
	return 0;
}

int sq_ipcdev_setup(int ns_mnt, int root_fd, const char **what)
{
	struct keep keep[MAX_KEEP];
	int n = 0, pts = -1;

	*what = "joining the container's mount namespace";
	if (setns(ns_mnt, CLONE_NEWNS) < 0)
		return -1;
	*what = "entering the container's root";
	if (fchdir(root_fd) < 0 || chroot(".") < 0)
		return -1;
	*what = "reading the container's /dev";
	if (collect(keep, &n, &pts) < 0)
		return -1;
	/* Nothing done here may reach the node's /dev. */
	*what = "making /dev private to the container";
	if (mount(NULL, "dev", NULL, MS_REC | MS_SLAVE, NULL) < 0 && errno != EINVAL)
		return -1;    /* EINVAL: /dev is no mount of its own, nothing to keep apart */
	if (build(keep, n, pts, what) < 0)
		return -1;
	if (pts >= 0)
		close(pts);
	return replace(what);
}
