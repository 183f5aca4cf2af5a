/* running.c: see running.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procstat.h"
#include "running.h"
#include "safeopen.h"
#include "smallio.h"
#include "strbuf.h"

#define RECORD_PREFIX "running-"

static void record_path(char *buf, size_t len, const char *dir, const char *name)
{
	snprintf(buf, len, "%s/" RECORD_PREFIX "%s", dir, name);
}

int sq_running_live(const char *dir, const char *name)
{
	unsigned long long recorded, now;
	char state;
	pid_t pid;

	return sq_running_read(dir, name, &pid, &recorded) == 0 &&
	       sq_procstat_read(pid, &state, &now) == 0 && now == recorded &&
	       state != 'Z' && state != 'X';
}

int sq_running_record(const char *dir, const char *name, pid_t pid,
		      unsigned long long starttime, pid_t nspid, unsigned long long nsstart,
		      char *err, size_t errlen)
{
	char path[PATH_MAX], line[96];

	/* The first running instance stays the one to join (a no_exec step starts a second
	 * one of the same container; its end must not hide the first). */
	if (sq_running_live(dir, name))
		return 0;
	if (sq_running_format_ns((long)pid, starttime, (long)nspid, nsstart, line,
				 sizeof(line)) < 0)
		return sq_errf(err, errlen, "cannot format the running-container record");
	record_path(path, sizeof(path), dir, name);
	if (sq_write_record(path, line) == 0)
		return 0;
	return sq_errf(err, errlen, "cannot record the running container in %s: %s", dir,
		       strerror(errno));
}

int sq_running_read_ns(const char *dir, const char *name, pid_t *pid,
		       unsigned long long *starttime, pid_t *nspid, unsigned long long *nsstart)
{
	char path[PATH_MAX], buf[160];
	ssize_t n;
	long p, np;
	int fd;

	record_path(path, sizeof(path), dir, name);
	/* Read as root at the step's end too: a FIFO or link planted there is not opened. */
	fd = sq_open_regular(AT_FDCWD, path, SQ_OPEN_NOFOLLOW, NULL);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n <= 0 || sq_running_parse_ns(buf, (size_t)n, &p, starttime, &np, nsstart) < 0)
		return -1;
	*pid = (pid_t)p;
	*nspid = (pid_t)np;
	return 0;
}

int sq_running_read(const char *dir, const char *name, pid_t *pid,
		    unsigned long long *starttime)
{
	unsigned long long nsstart;
	pid_t nspid;

	return sq_running_read_ns(dir, name, pid, starttime, &nspid, &nsstart);
}

void sq_running_forget(const char *dir, const char *name, pid_t pid)
{
	char path[PATH_MAX];
	unsigned long long start;
	pid_t recorded;

	if (sq_running_read(dir, name, &recorded, &start) == 0 && recorded == pid) {
		record_path(path, sizeof(path), dir, name);
		unlink(path);
	}
}

/* name (after the prefix) is pyxis_JOBID.STEPID, or with scope_job pyxis_JOBID_NAME, either
 * possibly followed by a temp suffix ".tmp.PID". */
static int job_record(const char *name, const char *job, int scope_job)
{
	size_t jl = strlen(job);
	const char *p;

	if (strncmp(name, job, jl) != 0)
		return 0;
	p = name + jl;
	if (*p == '_')
		return scope_job && p[1] != '\0';
	if (*p++ != '.' || *p < '0' || *p > '9')
		return 0;
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p == '\0')
		return 1;
	if (strncmp(p, ".tmp.", 5) != 0 || p[5] == '\0')
		return 0;
	for (p += 5; *p >= '0' && *p <= '9'; p++)
		;
	return *p == '\0';
}

int sq_running_sweep_job(int dirfd_, uint32_t jobid, int scope_job)
{
	size_t plen = strlen(RECORD_PREFIX);
	char job[32];
	struct dirent *e;
	int removed = 0;
	DIR *d = sq_dir_stream(dirfd_);

	if (d == NULL)
		return 0;
	snprintf(job, sizeof(job), "pyxis_%u", (unsigned)jobid);
	while ((e = readdir(d)) != NULL) {
		struct stat s;

		if (strncmp(e->d_name, RECORD_PREFIX, plen) != 0 ||
		    !job_record(e->d_name + plen, job, scope_job))
			continue;
		/* Only the records themselves: a link, FIFO or directory under such a name is
		 * not ours to remove. */
		if (fstatat(dirfd_, e->d_name, &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(s.st_mode) &&
		    unlinkat(dirfd_, e->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}
