/* runcmd.c: see runcmd.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pidfd.h"
#include "runcmd.h"
#include "smallio.h"
#include "strbuf.h"

int sq_cred_groups(struct sq_cred *c, const char *name)
{
	int n = 64;

	for (int tries = 0; tries < 4; tries++) {
		gid_t *g = calloc((size_t)n, sizeof(*g));
		int want = n;
		if (g == NULL)
			return -1;
		if (getgrouplist(name, c->gid, g, &want) >= 0) {
			free(c->groups);
			c->groups = g;
			c->ngroups = want;
			return 0;
		}
		free(g);
		n = want > n ? want : n * 2;
	}
	return -1;
}

int sq_cred_init(struct sq_cred *c, uid_t uid, gid_t gid, char *err, size_t errlen)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	memset(c, 0, sizeof(*c));
	c->uid = uid;
	c->gid = gid;
	if (geteuid() != 0)
		return 0;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL) {
		sq_errf(err, errlen, "user id %u has no passwd entry on this node: add the user "
			"to the node's user database", (unsigned)uid);
		return -1;
	}
	if (sq_cred_groups(c, pw.pw_name) == 0)
		return 0;
	sq_errf(err, errlen, "cannot list the groups of user %s", pw.pw_name);
	return -1;
}

void sq_cred_free(struct sq_cred *c)
{
	free(c->groups);
	c->groups = NULL;
	c->ngroups = 0;
}

/* Move fd to 3 or above: when slurmstepd runs with 0, 1 or 2 closed (job scripts), a
 * new descriptor could be one of them and the child's dup2 calls would clobber it. */
static int above_stdio(int fd)
{
	int moved;

	if (fd < 0 || fd > 2)
		return fd;
	moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return moved;
}

static int capture_fd(const char *name)
{
	return above_stdio(memfd_create(name, MFD_CLOEXEC));
}

/* In the child: report on fd 2 (the stderr memfd) and exit. */
static void child_fail(const char *what, const char *path)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "squall: %s %s: %s\n", what, path, strerror(errno));

	if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* the exit status still says it failed */
	}
	_exit(127);
}

static void close_from(int first)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)first, ~0U, 0U) == 0)
		return;
#endif
	for (int fd = first; fd < 65536; fd++)
		close(fd);
}

/* In user_init slurmstepd runs with the user's effective id and root's real (or saved)
 * one: another identity's groups and ids (the image builder's) need root back first. */
static void regain_root(const struct sq_cred *cred)
{
	uid_t r, e, s;

	if (cred->groups == NULL || getresuid(&r, &e, &s) < 0 || e == 0 || (r != 0 && s != 0))
		return;
	if (seteuid(0) < 0)
		child_fail("cannot regain root to become", "another identity");
}

static void become_user(const struct sq_cred *cred)
{
	regain_root(cred);
	if (cred->groups != NULL && setgroups((size_t)cred->ngroups, cred->groups) < 0)
		child_fail("cannot set the groups for", "the job user");
	if (setresgid(cred->gid, cred->gid, cred->gid) < 0)
		child_fail("cannot set the group id for", "the job user");
	if (setresuid(cred->uid, cred->uid, cred->uid) < 0)
		child_fail("cannot set the user id for", "the job user");
	/* Never run the runtime with any root id left. */
	if (getuid() != cred->uid || geteuid() != cred->uid || getgid() != cred->gid)
		child_fail("cannot drop privileges for", "the job user");
}

/* Join the step's cgroup: best effort (a node without proctrack/cgroup has none to join,
 * and the child then runs as before). */
static void join_cgroup(const struct sq_cred *cred, const char *procs)
{
	if (procs == NULL || procs[0] == '\0')
		return;
	regain_root(cred);
	(void)sq_write_text(procs, "0\n");
}

static void reset_signals(void)
{
	sigset_t all;
	struct sigaction dfl;

	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &dfl, NULL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
}

/* The child's capture files and /dev/null for its stdin: the descriptor of /dev/null, or
 * -1 with err (nothing left open). */
static int child_prepare(const char *path, struct sq_child *child, char *err, size_t errlen)
{
	int devnull;

	child->pid = -1;
	child->out_fd = capture_fd("squall-stdout");
	child->err_fd = capture_fd("squall-stderr");
	devnull = above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
	if (child->out_fd >= 0 && child->err_fd >= 0 && devnull >= 0)
		return devnull;
	sq_errf(err, errlen, "cannot prepare to run %s: %s", path, strerror(errno));
	if (devnull >= 0)
		close(devnull);
	sq_child_close(child);
	return -1;
}

/* In the child: pass_fds[i] (at most 8) become descriptors 3+i, lifted above every
 * target first so that placing one never clobbers another. */
static void lift_fds(const int *pass_fds, int npass, int lifted[8])
{
	for (int i = 0; i < npass && i < 8; i++)
		if ((lifted[i] = fcntl(pass_fds[i], F_DUPFD_CLOEXEC, 3 + npass)) < 0)
			_exit(127);
}

static void place_fds(const int lifted[8], int npass)
{
	for (int i = 0; i < npass && i < 8; i++)
		if (dup2(lifted[i], 3 + i) < 0)
			_exit(127);
	close_from(3 + (npass < 8 ? npass : 8));
}

static void stdio_to(int devnull, const struct sq_child *child)
{
	/* dup2 clears close-on-exec on the new descriptors */
	if (dup2(devnull, STDIN_FILENO) < 0 || dup2(child->out_fd, STDOUT_FILENO) < 0 ||
	    dup2(child->err_fd, STDERR_FILENO) < 0)
		_exit(127);
}

/* In the child, once it is the user: the working directory and umask it asked for. */
static void apply_opts(const struct sq_spawn_opts *o)
{
	if (o->umask >= 0)
		umask((mode_t)o->umask);
	if (o->dir != NULL && chdir(o->dir) < 0)
		child_fail("cannot change to the directory", o->dir);
}

/* The prologue of every spawn: the capture and /dev/null (child_prepare), then the fork.
 * Returns 0 in the child, its descriptors placed (pass_fds at 3 and up, stdin from
 * /dev/null, stdout and stderr to the capture) and its signals reset; in the parent the
 * child's PID (/dev/null closed, the capture kept in child), or -1 with err (nothing
 * left open). */
static pid_t fork_child(const char *path, const int *pass_fds, int npass,
			struct sq_child *child, char *err, size_t errlen)
{
	int devnull = child_prepare(path, child, err, errlen), lifted[8];
	pid_t pid;

	if (devnull < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		sq_errf(err, errlen, "cannot fork to run %s: %s", path, strerror(errno));
		close(devnull);
		sq_child_close(child);
		return -1;
	}
	if (pid == 0) {
		lift_fds(pass_fds, npass, lifted);
		stdio_to(devnull, child);
		place_fds(lifted, npass);
		reset_signals();
		return 0;
	}
	close(devnull);
	return pid;
}

static int spawn_with(const char *path, char *const argv[], char *const envp[],
		      const struct sq_cred *cred, const struct sq_spawn_opts *o, int own_group,
		      struct sq_child *child, char *err, size_t errlen)
{
	static const struct sq_spawn_opts none = { NULL, -1, NULL, 0, NULL, NULL, NULL };
	pid_t pid;

	if (o == NULL)
		o = &none;
	pid = fork_child(path, o->pass_fds, o->npass, child, err, errlen);
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (own_group)
			(void)setpgid(0, 0);  /* a group of its own: stopped whole (wait_ticking) */
		join_cgroup(cred, o->cgroup_procs);
		become_user(cred);
		apply_opts(o);
		execve(path, argv, envp);
		child_fail("cannot execute", path);
	}
	child->pid = pid;
	return 0;
}

int sq_spawn(const char *path, char *const argv[], char *const envp[],
	     const struct sq_cred *cred, struct sq_child *child, char *err, size_t errlen)
{
	return spawn_with(path, argv, envp, cred, NULL, 0, child, err, errlen);
}

int sq_child_wait(struct sq_child *child, int *status)
{
	pid_t r;

	do {
		r = waitpid(child->pid, status, 0);
	} while (r < 0 && errno == EINTR);
	return r == child->pid ? 0 : -1;
}

int sq_spawn_detached(const char *path, char *const argv[], char *const envp[],
		      const struct sq_cred *cred, const int *pass_fds, int npass,
		      struct sq_child *child, char *err, size_t errlen)
{
	int status;
	pid_t pid, got;

	pid = fork_child(path, pass_fds, npass, child, err, errlen);
	if (pid < 0)
		return -1;
	if (pid == 0) {
		become_user(cred);
		pid = fork();
		if (pid < 0)
			child_fail("cannot fork to run", path);
		if (pid > 0)
			_exit(0);
		/* Not a group leader (its parent leads the group): the session's id is its PID. */
		if (setsid() < 0)
			child_fail("cannot start a new session for", path);
		execve(path, argv, envp);
		child_fail("cannot execute", path);
	}
	do {
		got = waitpid(pid, &status, 0);
	} while (got < 0 && errno == EINTR);
	if (got != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char why[64];
		sq_status_text(status, why, sizeof(why));
		sq_child_failure(child, "starting", why, err, errlen);
		sq_child_close(child);
		return -1;
	}
	return 0;
}

void sq_child_close(struct sq_child *child)
{
	if (child->out_fd >= 0)
		close(child->out_fd);
	if (child->err_fd >= 0)
		close(child->err_fd);
	child->out_fd = child->err_fd = -1;
}

int sq_run(const char *path, char *const argv[], char *const envp[], const struct sq_cred *cred,
	   int *status, struct sq_child *child, char *err, size_t errlen)
{
	return sq_run_opts(path, argv, envp, cred, NULL, status, child, err, errlen);
}

/* See runcmd.h. The raw syscall changes only the calling thread's ids (glibc's seteuid
 * would change every thread of slurmstepd's). */
uid_t sq_thread_root(void)
{
	uid_t r, e, s;

	if (getresuid(&r, &e, &s) < 0 || e == 0 || (r != 0 && s != 0))
		return (uid_t)-1;
	if (syscall(SYS_setresuid, (uid_t)-1, (uid_t)0, (uid_t)-1) < 0)
		return (uid_t)-1;
	return e;
}

void sq_thread_back(uid_t e)
{
	if (e != (uid_t)-1)
		(void)syscall(SYS_setresuid, (uid_t)-1, e, (uid_t)-1);
}

/* Until the child has exited (left for sq_child_wait to reap), tick every second, and stop
 * its process group once w->gone says what it works for has gone. */
static void wait_ticking(const struct sq_child *child, const struct sq_spawn_opts *o,
			 struct sq_watch *w)
{
	int pidfd = sq_pidfd_open(child->pid);
	struct pollfd p = { pidfd, POLLIN, 0 };

	if (pidfd < 0)
		return;   /* no pidfd (an old kernel): no ticks, the wait is the same */
	for (;;) {
		int r = poll(&p, 1, 1000);
		if (r > 0 || (r < 0 && errno != EINTR))
			break;
		if (o != NULL && o->tick != NULL)
			o->tick(child->err_fd, o->tick_arg);
		if (w != NULL && !w->stopped && w->gone(w->arg)) {
			uid_t back = sq_thread_root();  /* the builder is another user's */
			w->stopped = 1;
			(void)kill(-child->pid, SIGKILL);
			(void)kill(child->pid, SIGKILL);
			sq_thread_back(back);
		}
	}
	close(pidfd);
}

static int run(const char *path, char *const argv[], char *const envp[],
	       const struct sq_cred *cred, const struct sq_spawn_opts *o,
	       struct sq_watch *w, int *status, struct sq_child *child, char *err,
	       size_t errlen)
{
	if (spawn_with(path, argv, envp, cred, o, w != NULL, child, err, errlen) < 0)
		return -1;
	if ((o != NULL && o->tick != NULL) || w != NULL)
		wait_ticking(child, o, w);
	if (sq_child_wait(child, status) < 0) {
		sq_errf(err, errlen, "lost track of %s (pid %d): %s", path, (int)child->pid,
			strerror(errno));
		return -1;
	}
	return 0;
}

int sq_run_opts(const char *path, char *const argv[], char *const envp[],
		const struct sq_cred *cred, const struct sq_spawn_opts *o, int *status,
		struct sq_child *child, char *err, size_t errlen)
{
	return run(path, argv, envp, cred, o, NULL, status, child, err, errlen);
}

int sq_run_watched(const char *path, char *const argv[], char *const envp[],
		   const struct sq_cred *cred, const struct sq_spawn_opts *o,
		   struct sq_watch *w, int *status, struct sq_child *child, char *err,
		   size_t errlen)
{
	return run(path, argv, envp, cred, o, w, status, child, err, errlen);
}

char *sq_capture_read(int fd)
{
	struct stat st;
	char *buf;
	ssize_t got;

	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0)
		return NULL;
	if (st.st_size > (16 << 20))
		st.st_size = 16 << 20;
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL)
		return NULL;
	got = pread(fd, buf, (size_t)st.st_size, 0);
	if (got <= 0) {
		free(buf);
		return NULL;
	}
	buf[got] = '\0';
	return buf;
}

void sq_capture_tail(int fd, int n, char *buf, size_t buflen)
{
	char *text = sq_capture_read(fd);
	char *start, *p;
	int lines = 0;
	size_t o = 0;

	if (buflen == 0)
		return;
	buf[0] = '\0';
	if (text == NULL)
		return;
	/* walk back over n non-empty lines */
	p = text + strlen(text);
	while (p > text && (p[-1] == '\n' || p[-1] == '\r'))
		*--p = '\0';
	start = p;
	while (start > text && lines < n) {
		start--;
		if (*start == '\n' && start[1] != '\0' && start[1] != '\n')
			lines++;
		if (lines == n)
			start++;
	}
	for (p = start; *p && o + 4 < buflen; p++) {
		if (*p == '\n') {
			if (o > 0 && p[1] != '\n' && p[1] != '\0') {
				memcpy(buf + o, " | ", 3);
				o += 3;
			}
		} else if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			buf[o++] = ' ';
		} else {
			buf[o++] = *p;
		}
	}
	buf[o] = '\0';
	free(text);
}

void sq_status_text(int status, char *buf, size_t buflen)
{
	if (WIFEXITED(status))
		snprintf(buf, buflen, "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, buflen, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, buflen, "status 0x%x", (unsigned)status);
}

void sq_child_failure(const struct sq_child *child, const char *what, const char *why,
		      char *err, size_t errlen)
{
	char tail[600];

	sq_capture_tail(child->err_fd, 3, tail, sizeof(tail));
	if (tail[0] == '\0')
		sq_capture_tail(child->out_fd, 3, tail, sizeof(tail));
	sq_errf(err, errlen, "%s failed (%s): %s", what, why,
		tail[0] ? tail : "the runtime printed nothing");
}
