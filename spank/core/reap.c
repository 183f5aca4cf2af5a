/* reap.c: see reap.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procstat.h"
#include "reap.h"

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
	ssize_t n;
	long real;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	line = strstr(buf, "\nUid:");
	return line != NULL && sscanf(line + 5, "%ld", &real) == 1 && real == uid;
}

/* The session id of pid when it belongs to uid and has not exited; -1 otherwise (gone,
 * a zombie, another user). */
static long session_of(long pid, long uid)
{
	char path[64], buf[1024], state;
	long ppid, pgrp, sid;
	unsigned long long start;
	ssize_t n;
	int fd;

	if (!sq_proc_owned_by(pid, uid))
		return -1;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf));
	close(fd);
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

/* 1 when pid belongs to uid and its mount namespace is (dev, ino). */
static int in_mntns(long pid, long uid, unsigned long long dev, unsigned long long ino)
{
	unsigned long long d, i;

	return sq_proc_owned_by(pid, uid) && sq_mntns_of(pid, &d, &i) == 0 && d == dev && i == ino;
}

/* SIGKILL every process of /proc for which match(pid) holds; count, or -1. */
static int reap_where(int (*match)(long pid, const void *arg), const void *arg, long except)
{
	struct dirent *e;
	DIR *d = opendir("/proc");
	int count = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		if (*end != '\0' || pid <= 0 || pid == except || pid == (long)getpid())
			continue;
		if (match(pid, arg) && kill((pid_t)pid, SIGKILL) == 0)
			count++;
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

static int match_mntns(long pid, const void *arg)
{
	const struct mntns_arg *a = arg;
	return in_mntns(pid, a->uid, a->dev, a->ino);
}

int sq_reap_session(long sid, long uid, long except)
{
	struct session_arg a = { sid, uid };

	if (sid <= 0)
		return 0;
	return reap_where(match_session, &a, except);
}

int sq_reap_mntns(unsigned long long dev, unsigned long long ino, long uid, long except)
{
	struct mntns_arg a = { dev, ino, uid };

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

int sq_session_mntns(long sid, long uid, unsigned long long *devs, unsigned long long *inos,
		     int max)
{
	unsigned long long own_dev = 0, own_ino = 0;
	struct dirent *e;
	DIR *d;
	int n = 0;

	if (sid <= 0 || max <= 0 || (d = opendir("/proc")) == NULL)
		return 0;
	sq_mntns_of((long)getpid(), &own_dev, &own_ino);
	while ((e = readdir(d)) != NULL && n < max) {
		unsigned long long dev, ino;
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		int seen = 0;

		if (*end != '\0' || pid <= 0 || session_of(pid, uid) != sid ||
		    sq_mntns_of(pid, &dev, &ino) < 0 || (dev == own_dev && ino == own_ino))
			continue;
		for (int i = 0; i < n; i++)
			seen |= devs[i] == dev && inos[i] == ino;
		if (!seen) {
			devs[n] = dev;
			inos[n++] = ino;
		}
	}
	closedir(d);
	return n;
}
