/* shared_copy.c: see shared_copy.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "governor.h"
#include "safeopen.h"
#include "shared_copy.h"
#include "smallio.h"

#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_WHO_PROCESS 1
#define SEND_TRIES 3          /* a node of the step may make its cache directory late */
#define SUM_HEX 64

static const char *const sha256_tools[] = { "/usr/bin/sha256sum", "/bin/sha256sum", NULL };

/* Named by the step, not by the cache key: a node's key covers its own view of the file
 * (st_dev differs from client to client of a network file system). */
static void copy_name(char *buf, size_t len, const char *dir, const char *jobstep,
		      const char *what)
{
	if ((size_t)snprintf(buf, len, "%s/copy-%s.%s", dir, jobstep, what) >= len)
		buf[0] = '\0';
}

int sq_copy_hold(const char *cache_dir, const char *jobstep)
{
	char path[PATH_MAX];
	struct stat a, b;

	copy_name(path, sizeof(path), cache_dir, jobstep, "lock");
	if (!path[0])
		return -1;
	/* A sweep may remove a lock file nobody holds between its open and the flock here:
	 * held only when the path still names the locked file. */
	for (int i = 0; i < 3; i++) {
		int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);

		if (fd < 0)
			return -1;
		if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
		    lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			futimens(fd, NULL);
			return fd;
		}
		close(fd);
	}
	return -1;
}

void sq_copy_release(const char *cache_dir, const char *jobstep, int fd)
{
	char path[PATH_MAX];

	if (fd < 0)
		return;
	copy_name(path, sizeof(path), cache_dir, jobstep, "lock");
	if (path[0])
		unlink(path);
	close(fd);
}

/* sbcast is not governed (stopped between its RPCs it would time the slurmds out): it runs
 * at nice 19 and idle I/O priority, dies with this process. Its wait status, or -1. */
static int run_plain(char *const argv[])
{
	pid_t parent = getpid(), pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (devnull >= 0) {
			/* the plugin's captures are closed once the container runs */
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		setpriority(PRIO_PROCESS, 0, 19);
		syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << 13);
		execv(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return status;
}

/* sbcast -f -j JOBID SOURCE DEST: to the job's nodes, never to a step's. Slurm 24.11's
 * slurmctld, asked for the credential of a step that has ended (a short step ends while
 * its first node still sends), keeps a lock it took: the next request that writes (a
 * scancel, a requeue) hangs, and slurmctld aborts ("lock_slurmctld:
 * pthread_rwlock_rdlock(): Resource temporarily unavailable"; seen on the mini cluster,
 * tests/integration/test_plugin_localcache.py). Tried again when it fails (a node that has
 * not made its cache directory yet fails the whole broadcast). 0 ok, -1 failed. */
static int broadcast(const char *sbcast, const char *jobstep, const char *source,
		     const char *dest)
{
	char job[24];
	char *const argv[] = { (char *)sbcast, "-f", "-j", job, (char *)source, (char *)dest,
			       NULL };

	snprintf(job, sizeof(job), "%.*s", (int)strcspn(jobstep, "."), jobstep);
	for (int i = 0; i < SEND_TRIES; i++) {
		int status = run_plain(argv);

		if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
			return 0;
		if (i + 1 < SEND_TRIES)
			sleep(2u << i);
	}
	return -1;
}

/* The SHA-256 of the file open on fd, 64 hex digits, by coreutils' sha256sum at the
 * extraction's priority. 0 ok, -1 failed. */
static int digest_of(int fd, char hex[SUM_HEX + 1])
{
	char path[64], out[256];
	const char *tool = NULL;
	int pipefd[2], status;

	for (int i = 0; sha256_tools[i] != NULL && tool == NULL; i++)
		if (access(sha256_tools[i], X_OK) == 0)
			tool = sha256_tools[i];
	if (tool == NULL || pipe2(pipefd, O_CLOEXEC) < 0)
		return -1;
	/* The child reads the very file held here. */
	if (fcntl(fd, F_SETFD, 0) < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	{
		char *const argv[] = { (char *)tool, path, NULL };
		status = sq_run_governed(argv, pipefd[1]);
	}
	close(pipefd[1]);
	if (sq_read_text(pipefd[0], out, sizeof(out)) < SUM_HEX || status < 0 ||
	    !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	for (int i = 0; i < SUM_HEX; i++)
		if (!((out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'f')))
			return -1;
	memcpy(hex, out, SUM_HEX);
	hex[SUM_HEX] = '\0';
	return 0;
}

/* The record, written here and sent to the step's nodes (this one included). */
static int send_record(const char *cache_dir, const char *jobstep, const char *sbcast,
		       const char *text)
{
	char out[PATH_MAX], sum[PATH_MAX];
	int rv;

	copy_name(out, sizeof(out), cache_dir, jobstep, "out");
	copy_name(sum, sizeof(sum), cache_dir, jobstep, "sum");
	if (!out[0] || !sum[0] || sq_write_record(out, text) < 0)
		return -1;
	rv = broadcast(sbcast, jobstep, out, sum);
	unlink(out);
	unlink(sum);    /* this node's own: it does not wait for it */
	return rv;
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The source this node sends: the copy an earlier job left in KEY.part (its key names the
 * image as it was: same size), else the image, the very file stat'ed as shared (not one
 * renamed over its path in between). -1 when neither. */
static int open_source(const char *cache_dir, const char *key, const char *image,
		       const struct stat *shared)
{
	char path[PATH_MAX];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%s.part/image.sqsh", cache_dir, key);
	fd = sq_open_regular(AT_FDCWD, path, SQ_OPEN_NOFOLLOW, NULL);
	if (fd < 0)
		fd = sq_open_regular(AT_FDCWD, image, 0, NULL);
	else if (fstat(fd, &st) < 0 || st.st_size != shared->st_size) {
		close(fd);
		fd = sq_open_regular(AT_FDCWD, image, 0, NULL);
	} else {
		return fd;
	}
	if (fd >= 0 && (fstat(fd, &st) < 0 || !same_file(&st, shared))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The copy at path, when it is a regular file of size bytes with digest hex. */
static int copy_matches(const char *path, long long size, const char *hex)
{
	char got[SUM_HEX + 1];
	struct stat st;
	int fd = sq_open_regular(AT_FDCWD, path, SQ_OPEN_NOFOLLOW, NULL), ok;

	if (fd < 0)
		return 0;
	ok = fstat(fd, &st) == 0 && st.st_uid == getuid() && (long long)st.st_size == size &&
	     digest_of(fd, got) == 0 && strcmp(got, hex) == 0;
	close(fd);
	return ok;
}

int sq_copy_send(const char *cache_dir, const char *key, const char *image, const char *jobstep,
		 const char *sbcast, int have_tree, char *copy, size_t copylen)
{
	char source[64], hex[SUM_HEX + 1], text[192];
	struct stat before, after, shared;
	int fd = -1, fd2;

	if (have_tree)
		return send_record(cache_dir, jobstep, sbcast, "none\n"), 0;
	copy[0] = '\0';
	copy_name(copy, copylen, cache_dir, jobstep, "in");
	/* The image as every node sees it (the record names it), and the file sent: the same
	 * one, or this node's copy of it that an earlier job left (its key names that file). */
	if (stat(image, &shared) < 0)
		goto none;
	fd = open_source(cache_dir, key, image, &shared);
	/* sbcast reads the file this descriptor holds: the one checked, whatever its name
	 * becomes meanwhile (a tag rebuilt over the path). */
	if (!copy[0] || fd < 0 || fstat(fd, &before) < 0 || fcntl(fd, F_SETFD, 0) < 0)
		goto none;
	snprintf(source, sizeof(source), "/proc/self/fd/%d", fd);
	if (broadcast(sbcast, jobstep, source, copy) < 0 || fstat(fd, &after) < 0 ||
	    !same_file(&before, &after))
		goto none;
	close(fd);
	fd = -1;
	/* What this node received is what every node received when the digests agree. */
	fd2 = sq_open_regular(AT_FDCWD, copy, SQ_OPEN_NOFOLLOW, NULL);
	if (fd2 < 0)
		goto none;
	if (fstat(fd2, &after) < 0 || after.st_size != before.st_size || digest_of(fd2, hex) < 0) {
		close(fd2);
		goto none;
	}
	close(fd2);
	snprintf(text, sizeof(text), "%s %lld %llu %lld %ld\n", hex, (long long)shared.st_size,
		 (unsigned long long)shared.st_ino, (long long)shared.st_mtim.tv_sec,
		 (long)shared.st_mtim.tv_nsec);
	if (send_record(cache_dir, jobstep, sbcast, text) < 0)
		goto none;
	return 1;
none:
	if (fd >= 0)
		close(fd);
	if (copy[0])
		unlink(copy);
	copy[0] = '\0';
	send_record(cache_dir, jobstep, sbcast, "none\n");
	return 0;
}

/* The record's file is the image this node sees at image: same inode, size and mtime
 * (the device is each client's own). */
static int names_image(const char *image, unsigned long long ino, long long size,
		       long long sec, long nsec)
{
	struct stat st;

	return stat(image, &st) == 0 && (unsigned long long)st.st_ino == ino &&
	       (long long)st.st_size == size && (long long)st.st_mtim.tv_sec == sec &&
	       (long)st.st_mtim.tv_nsec == nsec;
}

/* How long a receiver has waited, and what it has seen of its copy. */
struct copy_wait {
	long long start;        /* when it began to wait */
	long long first_s;      /* how long for the copy to begin */
	long long changed;      /* when the copy last grew or was touched (0: never seen) */
	long long size;         /* its size then, -1 when none */
	long long mtime;
};

/* 1 when the record is not worth waiting for any longer: no copy begun first_s
 * seconds into the wait (nobody sends for this step: the job's kept container on its
 * first node started in an earlier step), or none since the copy stopped growing for
 * SQ_COPY_RECORD_S seconds plus the time the first node's digest of that many bytes may
 * take at the extraction's floor (SQ_COPY_DIGEST_BPS). */
static int copy_wait_over(struct copy_wait *w, const char *copy, long long now)
{
	struct stat st;

	if (stat(copy, &st) == 0 && ((long long)st.st_size != w->size ||
				     (long long)st.st_mtime != w->mtime)) {
		w->size = (long long)st.st_size;
		w->mtime = (long long)st.st_mtime;
		w->changed = now;
	}
	if (w->changed == 0)
		return now - w->start >= w->first_s;
	return now - w->changed >= SQ_COPY_RECORD_S + w->size / SQ_COPY_DIGEST_BPS;
}

int sq_copy_receive(const char *cache_dir, const char *image, const char *jobstep, int first_s,
		    char *copy, size_t copylen)
{
	char sum[PATH_MAX], text[192], hex[SUM_HEX + 1];
	unsigned long long ino;
	long long size, sec;
	long nsec;
	int fd;

	copy_name(sum, sizeof(sum), cache_dir, jobstep, "sum");
	copy_name(copy, copylen, cache_dir, jobstep, "in");
	if (!sum[0] || !copy[0])
		return 0;
	/* A local stat a second: the record comes when the first node has sent all. slurmd
	 * creates it, then writes it: a record is whole when it ends its line. Waited for a
	 * bounded time (sq_copy_wait_over): nobody may send for this step. */
	for (struct copy_wait w = { time(NULL), first_s > 0 ? first_s : SQ_COPY_FIRST_DEFAULT_S,
				    0, -1, 0 };;) {
		fd = sq_open_regular(AT_FDCWD, sum, SQ_OPEN_NOFOLLOW, NULL);
		if (fd >= 0 && sq_read_text(fd, text, sizeof(text)) > 0 && strchr(text, '\n'))
			break;
		if (copy_wait_over(&w, copy, time(NULL))) {
			unlink(copy);    /* a late one goes by the sweep (sq_copy_unused) */
			copy[0] = '\0';
			return 0;
		}
		sleep(1);
	}
	unlink(sum);
	if (sscanf(text, "%64[0-9a-f] %lld %llu %lld %ld", hex, &size, &ino, &sec, &nsec) == 5 &&
	    strlen(hex) == SUM_HEX && names_image(image, ino, size, sec, nsec) &&
	    copy_matches(copy, size, hex))
		return 1;
	unlink(copy);
	copy[0] = '\0';
	return 0;
}
