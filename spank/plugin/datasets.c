/* datasets.c: see datasets.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dataset.h"
#include "datasets.h"
#include "mountpoint.h"
#include "pidfd.h"
#include "strbuf.h"
#include "stepconf.h"

#define READY_MS 10000

/* The signals Slurm sends a step (and a user's `kill -1`): squashfuse dies of some of
 * them, and the step's files would go with it (docs/plugin.md, Signals). */
static const int job_signals[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM };

enum phase { PH_PID = 0, PH_USER, PH_OPEN, PH_MAGIC, PH_USERNS, PH_FUSE, PH_FORK, PH_MNTNS,
	     PH_POINT, PH_MOUNT, PH_EXEC, PH_COUNT };

static const char *const phase_text[PH_COUNT] = {
	"", "becoming the job user", "opening it as the job user", "reading its magic",
	"entering the container's user namespace", "opening /dev/fuse",
	"forking", "entering the container's mount namespace",
	"making its mount point in the container", "mounting it", "running squashfuse" };

struct report {
	int phase;
	int code;
	pid_t pid;
};

int sq_datasets_add(struct sq_datasets *d, const char *source, const char *target,
		    char *err, size_t errlen)
{
	struct sq_dataset *ds;

	if (d->count >= SQ_DATASETS_MAX)
		return sq_errf(err, errlen, "--container-mounts: more than %d squashfs datasets: "
			       "pack them into fewer images", SQ_DATASETS_MAX);
	ds = &d->items[d->count];
	ds->source = strdup(source);
	ds->target = strdup(target);
	ds->server = 0;
	ds->pidfd = -1;
	if (ds->source == NULL || ds->target == NULL) {
		free(ds->source);
		free(ds->target);
		return sq_errf(err, errlen, "out of memory");
	}
	d->count++;
	return 0;
}

static void say(int fd, int phase, int code)
{
	struct report r = { phase, code, getpid() };

	if (write(fd, &r, sizeof(r)) < 0) {
		/* the parent then reads nothing: "no answer" */
	}
}

static _Noreturn void fail(int report, int phase)
{
	say(report, phase, errno);
	_exit(1);
}

/* squashfuse on slurmstepd's PATH (Enroot finds it the same way). */
static int find_squashfuse(char *buf, size_t buflen)
{
	const char *path = getenv("PATH");

	if (path == NULL || *path == '\0')
		path = SQ_STANDARD_PATH;
	for (const char *s = path, *e; s != NULL; s = e ? e + 1 : NULL) {
		e = strchr(s, ':');
		int n = e ? (int)(e - s) : (int)strlen(s);
		if (n > 0 && s[0] == '/' &&
		    (size_t)snprintf(buf, buflen, "%.*s/squashfuse", n, s) < buflen &&
		    access(buf, X_OK) == 0)
			return 0;
	}
	return -1;
}

static int by_value(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* stdin, stdout, stderr on /dev/null and every other descriptor closed but keep[]: none of
 * slurmstepd's (the step's I/O would wait for squashfuse to end). */
static void close_others(int *keep, size_t n)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	unsigned int from = 3;

	for (int fd = 0; fd < 3 && null >= 0; fd++)
		dup2(null, fd);
	qsort(keep, n, sizeof(*keep), by_value);
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)from)
			continue;
		if ((unsigned int)keep[i] > from)
			close_range(from, (unsigned int)keep[i] - 1, 0);
		from = (unsigned int)keep[i] + 1;
	}
	close_range(from, ~0U, 0);
}

/* In the container's mount namespace: the mount point and the FUSE mount on fuse. */
static _Noreturn void mount_child(const struct sq_dataset *ds, int ns_mnt, int root_fd,
				  int fuse, int report)
{
	char data[192];

	if (setns(ns_mnt, CLONE_NEWNS) < 0)
		fail(report, PH_MNTNS);
	if (root_fd >= 0 && (fchdir(root_fd) < 0 || chroot(".") < 0))
		fail(report, PH_MNTNS);
	if (sq_mount_point_make(ds->target, (uid_t)-1) < 0)
		fail(report, PH_POINT);
	snprintf(data, sizeof(data), "fd=%d,rootmode=40000,user_id=%u,group_id=%u,"
		 "allow_other,default_permissions", fuse, (unsigned)getuid(), (unsigned)getgid());
	if (mount(ds->source, ds->target, "fuse.squashfuse", MS_RDONLY | MS_NOSUID | MS_NODEV,
		  data) < 0)
		fail(report, PH_MOUNT);
	_exit(0);
}

struct where {
	int ns_user, ns_mnt, root_fd;
	uid_t uid;
	gid_t gid;
	const char *squashfuse;
};

/* The server: the job user, the file opened, the mount made by a child, then squashfuse. */
static _Noreturn void server(const struct sq_dataset *ds, const struct where *w, int notify,
			     int report)
{
	char img_path[32], fuse_path[32], opts[96];
	char *envp[] = { "PATH=/usr/bin:/bin", NULL };
	unsigned char head[4];
	int img, fuse, status = 0;
	sigset_t none;
	pid_t m;

	int keep[] = { notify, report, w->ns_user, w->ns_mnt, w->root_fd };

	say(report, PH_PID, 0);
	close_others(keep, sizeof(keep) / sizeof(keep[0]));
	for (size_t i = 0; i < sizeof(job_signals) / sizeof(job_signals[0]); i++)
		signal(job_signals[i], SIG_IGN);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if ((seteuid(0) < 0 && geteuid() != 0) || setresgid(w->gid, w->gid, w->gid) < 0 ||
	    setresuid(w->uid, w->uid, w->uid) < 0)
		fail(report, PH_USER);
	img = open(ds->source, O_RDONLY | O_NOCTTY);   /* inherited: squashfuse reads it */
	if (img < 0)
		fail(report, PH_OPEN);
	if (pread(img, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
	    !sq_dataset_magic(head, sizeof(head))) {
		errno = EINVAL;
		fail(report, PH_MAGIC);
	}
	if (w->ns_user >= 0 && setns(w->ns_user, CLONE_NEWUSER) < 0)
		fail(report, PH_USERNS);
	/* Opened in the container's user namespace: the kernel mounts FUSE only on a
	 * /dev/fuse opened in the namespace that mounts it. */
	fuse = open("/dev/fuse", O_RDWR);
	if (fuse < 0)
		fail(report, PH_FUSE);
	m = fork();
	if (m < 0)
		fail(report, PH_FORK);
	if (m == 0)
		mount_child(ds, w->ns_mnt, w->root_fd, fuse, report);
	while (waitpid(m, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		_exit(1);   /* the child said why */
	snprintf(img_path, sizeof(img_path), "/dev/fd/%d", img);
	snprintf(fuse_path, sizeof(fuse_path), "/dev/fd/%d", fuse);
	/* Every file the user's, as Enroot shows an image: the container maps no other id. */
	snprintf(opts, sizeof(opts), "notify_pipe=/dev/fd/%d,uid=%u,gid=%u", notify,
		 (unsigned)getuid(), (unsigned)getgid());
	{
		char *argv[] = { "squashfuse", "-f", "-o", opts, img_path, fuse_path, NULL };
		execve(w->squashfuse, argv, envp);
	}
	fail(report, PH_EXEC);
}

/* Whether squashfuse said it serves ('s') within READY_MS. */
static int served(int notify)
{
	struct pollfd p = { notify, POLLIN, 0 };
	char c = 0;

	while (poll(&p, 1, READY_MS) < 0 && errno == EINTR)
		;
	return (p.revents & POLLIN) && read(notify, &c, 1) == 1 && c == 's';
}

static int mount_one(struct sq_dataset *ds, const struct where *w, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], tshow[SQ_SHOW_MAX];
	int rep[2], note[2], status = 0, ok;
	struct report r = { 0, 0, 0 }, last = { 0, 0, 0 };
	pid_t mid;

	sq_show(ds->source, show, sizeof(show));
	sq_show(ds->target, tshow, sizeof(tshow));
	if (pipe2(rep, O_CLOEXEC) < 0)
		return sq_errf(err, errlen, "--container-mounts: cannot mount the dataset %s: %s",
			       show, strerror(errno));
	if (pipe(note) < 0) {
		close(rep[0]);
		close(rep[1]);
		return sq_errf(err, errlen, "--container-mounts: cannot mount the dataset %s: %s",
			       show, strerror(errno));
	}
	fcntl(note[0], F_SETFD, FD_CLOEXEC);
	mid = fork();
	if (mid == 0) {
		/* Not slurmstepd's child: it reaps its tasks by any PID. */
		close(rep[0]);
		close(note[0]);
		if (fork() == 0)
			server(ds, w, note[1], rep[1]);
		_exit(0);
	}
	close(rep[1]);
	close(note[1]);
	if (mid > 0)
		while (waitpid(mid, &status, 0) < 0 && errno == EINTR)
			;
	/* Its PID, then why it failed, or nothing (it runs squashfuse). */
	while (read(rep[0], &r, sizeof(r)) == (ssize_t)sizeof(r)) {
		if (r.phase == PH_PID)
			ds->server = r.pid;
		else
			last = r;
	}
	close(rep[0]);
	ok = mid > 0 && ds->server > 0 && last.phase == 0 && served(note[0]);
	close(note[0]);
	if (ds->server > 0)
		ds->pidfd = sq_pidfd_open(ds->server);
	if (ok)
		return 0;
	if (ds->pidfd >= 0)
		sq_pidfd_signal(ds->pidfd, SIGKILL);
	if (last.phase > 0 && last.phase < PH_COUNT)
		return sq_errf(err, errlen, "--container-mounts: cannot mount the dataset %s at "
			       "%s (%s: %s)", show, tshow, phase_text[last.phase],
			       strerror(last.code));
	return sq_errf(err, errlen, "--container-mounts: cannot mount the dataset %s at %s: "
		       "squashfuse did not serve it within %d s (a damaged squashfs image? "
		       "`unsquashfs -s %s` checks it)", show, tshow, READY_MS / 1000, show);
}

int sq_datasets_mount(struct sq_datasets *d, int ns_user, int ns_mnt, int root_fd, uid_t uid,
		      gid_t gid, char *err, size_t errlen)
{
	char squashfuse[PATH_MAX];
	struct where w = { ns_user, ns_mnt, root_fd, uid, gid, squashfuse };

	if (d->count == 0)
		return 0;
	if (find_squashfuse(squashfuse, sizeof(squashfuse)) < 0)
		return sq_errf(err, errlen, "--container-mounts: squashfuse is not on slurmstepd's "
			       "PATH: install it (Enroot needs it too) to mount squashfs datasets");
	for (size_t i = 0; i < d->count; i++)
		if (mount_one(&d->items[i], &w, err, errlen) < 0)
			return -1;
	return 0;
}

void sq_datasets_end(struct sq_datasets *d)
{
	for (size_t i = 0; i < d->count; i++) {
		struct sq_dataset *ds = &d->items[i];
		if (ds->pidfd >= 0) {
			sq_pidfd_signal(ds->pidfd, SIGKILL);
			sq_pidfd_wait_exit(ds->pidfd, 2000);
			close(ds->pidfd);
		}
		free(ds->source);
		free(ds->target);
	}
	memset(d, 0, sizeof(*d));
}
