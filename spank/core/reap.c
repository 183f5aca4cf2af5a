/* reap.c: see reap.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pidfd.h"
#include "procstat.h"
#include "reap.h"
#include "smallio.h"

#ifndef NS_GET_USERNS
#define NS_GET_USERNS 0xb701          /* _IO(0xb7, 0x1), linux/nsfs.h */
#endif
#ifndef NS_GET_NSTYPE
#define NS_GET_NSTYPE 0xb703          /* _IO(0xb7, 0x3) */
#endif

/* A signed decimal number at s[*i..len); advances *i. */
static int read_long(const char *s, size_t len, size_t *i, long *out)
{
	long v = 0, sign = 1;
	size_t start;

	if (*i < len && s[*i] == '-') {
		sign = -1;
		(*i)++;
	}
	start = *i;
	while (*i < len && s[*i] >= '0' && s[*i] <= '9' && v < 100000000000L)
		v = v * 10 + (s[(*i)++] - '0');
	if (*i == start || (*i < len && s[*i] != ' ' && s[*i] != '\n'))
		return -1;
	*out = sign * v;
	return 0;
}

int sq_procstat_ids(const char *text, size_t len, long *ppid, long *pgrp, long *session)
{
	size_t i, paren = len;
	long *out[3] = { ppid, pgrp, session };

	for (i = len; i > 0; i--)
		if (text[i - 1] == ')') {
			paren = i - 1;
			break;
		}
	/* ") S 1 2 3": the state, then the three numbers, one space apart */
	if (paren == len || paren + 4 >= len || text[paren + 1] != ' ' || text[paren + 3] != ' ')
		return -1;
	i = paren + 4;
	for (int f = 0; f < 3; f++) {
		if (read_long(text, len, &i, out[f]) < 0)
			return -1;
		if (f < 2 && (i >= len || text[i++] != ' '))
			return -1;
	}
	return 0;
}

int sq_proc_owned_by(long pid, long uid)
{
	char path[64], buf[4096], *line;
	long real;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if (sq_read_text(open(path, O_RDONLY | O_CLOEXEC), buf, sizeof(buf)) <= 0)
		return 0;
	line = strstr(buf, "\nUid:");
	return line != NULL && sscanf(line + 5, "%ld", &real) == 1 && real == uid;
}

/* The session id of pid when it belongs to uid and has not exited; -1 otherwise (gone,
 * a zombie, another user). */
static long session_of(long pid, long uid)
{
	char buf[1024], state;
	long ppid, pgrp, sid;
	unsigned long long start;
	ssize_t n;

	if (!sq_proc_owned_by(pid, uid))
		return -1;
	n = sq_procstat_text(pid, buf, sizeof(buf));
	if (n <= 0 || sq_procstat_ids(buf, (size_t)n, &ppid, &pgrp, &sid) < 0 ||
	    sq_procstat_parse(buf, (size_t)n, &state, &start) < 0 || state == 'Z' || state == 'X')
		return -1;
	return sid;
}

int sq_mntns_of(long pid, unsigned long long *dev, unsigned long long *ino)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", pid);
	if (stat(path, &st) < 0)
		return -1;
	*dev = (unsigned long long)st.st_dev;
	*ino = (unsigned long long)st.st_ino;
	return 0;
}

int sq_mntns_fd_id(int nsfd, unsigned long long *dev, unsigned long long *ino)
{
	struct stat st;

	if (nsfd < 0 || ioctl(nsfd, NS_GET_NSTYPE) != CLONE_NEWNS || fstat(nsfd, &st) < 0)
		return -1;
	*dev = (unsigned long long)st.st_dev;
	*ino = (unsigned long long)st.st_ino;
	return 0;
}

/* A test of one process, made while a pidfd of it is held. */
typedef int (*match_fn)(long pid, const void *arg);

/*
 * Every check of pid runs between pidfd_open and a use of that pidfd: when the signal
 * through the pidfd (0 for "still there", SIGKILL) reaches its process, the PID was not
 * freed in between, so what /proc/PID said was about that process. A process that exited
 * and whose number went to another before the check fails the signal with ESRCH.
 */
static int held_pidfd(long pid)
{
	return pid > 0 ? sq_pidfd_open((pid_t)pid) : -1;
}

/* A pinned descriptor of pid's mount namespace when match(pid) holds and pid is uid's;
 * -1 otherwise. */
static int pin_if(long pid, long uid, match_fn match, const void *arg)
{
	char path[64];
	int pidfd = held_pidfd(pid), nsfd = -1;

	if (pidfd < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", pid);
	if ((match == NULL || match(pid, arg)) && sq_proc_owned_by(pid, uid))
		nsfd = open(path, O_RDONLY | O_CLOEXEC);
	if (nsfd >= 0 && (!sq_proc_owned_by(pid, uid) || sq_pidfd_signal(pidfd, 0) < 0)) {
		close(nsfd);
		nsfd = -1;
	}
	close(pidfd);
	return nsfd;
}

int sq_mntns_pin(long pid, long uid)
{
	return pin_if(pid, uid, NULL, NULL);
}

/* SIGKILL every process of /proc for which match(pid) holds, each through a pidfd held
 * across its check; count, or -1. */
static int reap_where(match_fn match, const void *arg, long except)
{
	struct dirent *e;
	DIR *d = opendir("/proc");
	int count = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		int pidfd;

		if (*end != '\0' || pid <= 0 || pid == except || pid == (long)getpid())
			continue;
		if ((pidfd = held_pidfd(pid)) < 0)
			continue;
		if (match(pid, arg) && sq_pidfd_signal(pidfd, SIGKILL) == 0)
			count++;
		close(pidfd);
	}
	closedir(d);
	return count;
}

struct session_arg { long sid, uid; };
struct mntns_arg { unsigned long long dev, ino; long uid; };

static int match_session(long pid, const void *arg)
{
	const struct session_arg *a = arg;
	return session_of(pid, a->uid) == a->sid;
}

/* pid is uid's and its mount namespace is (dev, ino). */
static int match_mntns(long pid, const void *arg)
{
	const struct mntns_arg *a = arg;
	unsigned long long d, i;

	return sq_proc_owned_by(pid, a->uid) && sq_mntns_of(pid, &d, &i) == 0 && d == a->dev &&
	       i == a->ino;
}

int sq_reap_session(long sid, long uid, long except)
{
	struct session_arg a = { sid, uid };

	if (sid <= 0)
		return 0;
	return reap_where(match_session, &a, except);
}

/* The number of a namespace is compared only while nsfd holds it: the kernel gives a freed
 * namespace's inode number to the next one made, at once, so a number kept without a
 * descriptor may name the user's next container (issue 30). */
int sq_reap_mntns(int nsfd, long uid, long except)
{
	struct mntns_arg a = { 0, 0, uid };

	if (sq_mntns_fd_id(nsfd, &a.dev, &a.ino) < 0)
		return -1;
	return reap_where(match_mntns, &a, except);
}

long sq_mntns_find(unsigned long long dev, unsigned long long ino, long uid)
{
	struct dirent *e;
	long found = -1;
	DIR *d;

	if ((d = opendir("/proc")) == NULL)
		return -1;
	while (found < 0 && (e = readdir(d)) != NULL) {
		unsigned long long pdev, pino;
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		if (*end == '\0' && pid > 0 && sq_mntns_of(pid, &pdev, &pino) == 0 &&
		    pdev == dev && pino == ino && sq_proc_owned_by(pid, uid))
			found = pid;
	}
	closedir(d);
	return found;
}

/* Store nsfd in fds[0..n) unless a namespace there (or skip's) is the same one. Returns the
 * new count; nsfd is closed when not stored. */
static int add_distinct(int *fds, int n, int nsfd, unsigned long long skip_dev,
			unsigned long long skip_ino)
{
	unsigned long long dev, ino, d, i;

	if (sq_mntns_fd_id(nsfd, &dev, &ino) < 0 || (dev == skip_dev && ino == skip_ino))
		goto drop;
	for (int k = 0; k < n; k++)
		if (sq_mntns_fd_id(fds[k], &d, &i) == 0 && d == dev && i == ino)
			goto drop;
	fds[n] = nsfd;
	return n + 1;
drop:
	close(nsfd);
	return n;
}

int sq_session_mntns(long sid, long uid, int *fds, int max)
{
	unsigned long long own_dev = 0, own_ino = 0;
	struct session_arg a = { sid, uid };
	struct dirent *e;
	DIR *d;
	int n = 0;

	if (sid <= 0 || max <= 0 || (d = opendir("/proc")) == NULL)
		return 0;
	sq_mntns_of((long)getpid(), &own_dev, &own_ino);
	while ((e = readdir(d)) != NULL && n < max) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		int nsfd;

		if (*end != '\0' || pid <= 0 || (nsfd = pin_if(pid, uid, match_session, &a)) < 0)
			continue;
		n = add_distinct(fds, n, nsfd, own_dev, own_ino);
	}
	closedir(d);
	return n;
}

/* The user namespace that owns the mount namespace nsfd: (dev, ino) while *fd is open. */
static int owner_of(int nsfd, int *fd, unsigned long long *dev, unsigned long long *ino)
{
	struct stat st;

	*fd = ioctl(nsfd, NS_GET_USERNS);
	if (*fd < 0)
		return -1;
	if (fstat(*fd, &st) < 0) {
		close(*fd);
		*fd = -1;
		return -1;
	}
	*dev = (unsigned long long)st.st_dev;
	*ino = (unsigned long long)st.st_ino;
	return 0;
}

int sq_mntns_pin_owned(unsigned long long dev, unsigned long long ino, long uid, int owner)
{
	struct mntns_arg a = { dev, ino, uid };
	unsigned long long udev, uino, odev, oino;
	struct stat self;
	struct dirent *e;
	int ufd, found = -1;
	DIR *d;

	/* Owned by our own user namespace, it would not tell containers apart. */
	if (owner_of(owner, &ufd, &udev, &uino) < 0)
		return -1;
	if (stat("/proc/self/ns/user", &self) < 0 ||
	    ((unsigned long long)self.st_dev == udev && (unsigned long long)self.st_ino == uino) ||
	    (d = opendir("/proc")) == NULL) {
		close(ufd);
		return -1;
	}
	while (found < 0 && (e = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		int nsfd, ofd;

		if (*end != '\0' || pid <= 0 || (nsfd = pin_if(pid, uid, match_mntns, &a)) < 0)
			continue;
		/* Pinned now: its number is (dev, ino) as long as nsfd is open. */
		if (owner_of(nsfd, &ofd, &odev, &oino) == 0) {
			if (odev == udev && oino == uino && sq_mntns_fd_id(nsfd, &odev, &oino) == 0 &&
			    odev == dev && oino == ino)
				found = nsfd;
			close(ofd);
		}
		if (found < 0)
			close(nsfd);
	}
	closedir(d);
	close(ufd);
	return found;
}
