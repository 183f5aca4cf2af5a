/* nsholder.c: see nsholder.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipcdev.h"
#include "nsholder.h"
#include "pidfd.h"
#include "procstat.h"
#include "strbuf.h"
#include "unshare.h"

static const int kinds[3] = { SQ_NS_NET, SQ_NS_IPC, SQ_NS_UTS };
static const int clone_flags[3] = { CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS };

void sq_nsholder_init(struct sq_nsholder *h)
{
	h->pid = -1;
	h->starttime = 0;
	h->pidfd = -1;
	h->owned = 0;
	for (int i = 0; i < 3; i++)
		h->fd[i] = -1;
}

/* --- in the forked child: async-signal-safe calls only -------------------------------- */

static void child_report(int fd, const char *what, int err)
{
	char msg[160], num[16];
	size_t n = 0, k = 0;
	int e = err;

	/* "what: errno N" without stdio (we are a fork of a threaded process). */
	do {
		num[k++] = (char)('0' + e % 10);
		e /= 10;
	} while (e > 0 && k < sizeof(num));
	for (const char *p = what; *p && n < sizeof(msg) - 24; p++)
		msg[n++] = *p;
	memcpy(msg + n, ": errno ", 8);
	n += 8;
	while (k > 0)
		msg[n++] = num[--k];
	if (write(fd, msg, n) < 0) {
		/* the parent then sees no "ok" */
	}
	_exit(1);
}

static int kept_fd(int fd, const int *keep, int nkeep)
{
	for (int i = 0; i < nkeep; i++)
		if (fd == keep[i])
			return 1;
	return 0;
}

static void child_quiet(const int *keep, int nkeep)
{
	struct sigaction ign;
	sigset_t none;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	/* Every descriptor but the ones we need. */
	for (int fd = 3; fd < 1024; fd++)
		if (!kept_fd(fd, keep, nkeep))
			close(fd);
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP && s != SIGCHLD)
			sigaction(s, &ign, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
}

static int loopback_up(void)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	if (s < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	close(s);
	return rc;
}

/* A private /dev (ipcdev.h), made by a child so the holder itself stays outside the
 * container's mount namespace. */
static void private_dev(int out, int ns_mnt, int root_fd)
{
	const char *what = "fork";
	int status = 0;
	pid_t pid = fork();

	if (pid == 0)
		_exit(sq_ipcdev_setup(ns_mnt, root_fd, &what) == 0 ? 0 : 100 + (errno & 0x7f));
	while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		child_report(out, "a private /dev/shm and /dev/mqueue for the IPC namespace",
			     pid < 0 ? errno : WIFEXITED(status) ? WEXITSTATUS(status) - 100 : 0);
	close(ns_mnt);
	close(root_fd);
}

static void child_main(int out, int mask, const struct sq_nsholder_target *t, uid_t uid,
		       gid_t gid)
{
	struct pollfd p = { .fd = t->container_pidfd, .events = POLLIN };
	const int keep[] = { out, t->ns_user, t->container_pidfd, t->ns_mnt, t->root_fd };
	int ns_user = t->ns_user, flags = 0;

	child_quiet(keep, 5);
	if (setresgid(gid, gid, gid) < 0)
		child_report(out, "setresgid", errno);
	if (setresuid(uid, uid, uid) < 0)
		child_report(out, "setresuid", errno);
	/* Changing ids made us undumpable: other steps of the user must open our namespaces. */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	if (ns_user >= 0 && setns(ns_user, CLONE_NEWUSER) < 0)
		child_report(out, "setns into the container's user namespace", errno);
	if (ns_user >= 0)
		close(ns_user);
	for (int i = 0; i < 3; i++)
		if (mask & kinds[i])
			flags |= clone_flags[i];
	if (unshare(flags) < 0)
		child_report(out, "unshare", errno);
	if ((mask & SQ_NS_NET) && loopback_up() < 0)
		child_report(out, "bringing the loopback interface up", errno);
	if ((mask & SQ_NS_IPC) && t->ns_mnt >= 0 && t->root_fd >= 0)
		private_dev(out, t->ns_mnt, t->root_fd);
	if (write(out, "ok", 2) != 2)
		_exit(1);
	close(out);
	/* Hold the namespaces as long as the container lives. */
	for (;;) {
		int r = poll(&p, 1, -1);
		if (r > 0 || (r < 0 && errno != EINTR))
			_exit(0);
	}
}

/* --- in slurmstepd ------------------------------------------------------------------- */

/* Open the holder's namespaces that differ from ours into h->fd. */
static int open_namespaces(struct sq_nsholder *h, char *err, size_t errlen)
{
	for (int i = 0; i < 3; i++) {
		char path[64], self[64];
		struct stat a, b;
		const char *name = sq_ns_name(kinds[i]);
		int fd;

		snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)h->pid, name);
		snprintf(self, sizeof(self), "/proc/self/ns/%s", name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return sq_errf(err, errlen, "cannot open the container's %s namespace (%s): %s",
					name, path, strerror(errno));
		if (fstat(fd, &a) == 0 && stat(self, &b) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev) {
			close(fd);
			fd = -1;
		}
		h->fd[i] = fd;
	}
	return 0;
}

int sq_nsholder_make(struct sq_nsholder *h, int mask, const struct sq_nsholder_target *t,
		     uid_t uid, gid_t gid, char *err, size_t errlen)
{
	char buf[200], state;
	int pipefd[2], status;
	ssize_t n, got = 0;
	pid_t pid;

	sq_nsholder_init(h);
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return sq_errf(err, errlen, "--container-unshare: pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return sq_errf(err, errlen, "--container-unshare: fork: %s", strerror(errno));
	}
	if (pid == 0) {
		close(pipefd[0]);
		child_main(pipefd[1], mask, t, uid, gid);
		_exit(1);
	}
	close(pipefd[1]);
	while ((size_t)got < sizeof(buf) - 1 &&
	       ((n = read(pipefd[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0 ||
		(n < 0 && errno == EINTR)))
		if (n > 0)
			got += n;
	close(pipefd[0]);
	buf[got] = '\0';
	h->pid = pid;
	h->owned = 1;
	if (strcmp(buf, "ok") != 0) {
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		h->pid = -1;
		return sq_errf(err, errlen, "--container-unshare: cannot make the container's "
				"namespaces (%s): the node must allow unprivileged user namespaces",
				got ? buf : "the helper died");
	}
	h->pidfd = sq_pidfd_open(pid);
	if (h->pidfd < 0 || sq_procstat_read(pid, &state, &h->starttime) < 0 ||
	    open_namespaces(h, err, errlen) < 0) {
		if (h->pidfd < 0)
			sq_errf(err, errlen, "--container-unshare: cannot hold the namespace holder "
				"%d: %s", (int)pid, strerror(errno));
		sq_nsholder_release(h);
		return -1;
	}
	return 0;
}

int sq_nsholder_attach(struct sq_nsholder *h, pid_t pid, unsigned long long starttime,
		       int ns_user, char *err, size_t errlen)
{
	unsigned long long now = 0;
	struct stat a, b;
	char path[64], state;
	int fd;

	sq_nsholder_init(h);
	h->pid = pid;
	h->starttime = starttime;
	h->pidfd = sq_pidfd_open(pid);
	if (h->pidfd < 0 || sq_procstat_read(pid, &state, &now) < 0 || now != starttime ||
	    state == 'Z' || state == 'X')
		goto gone;
	/* The holder of this container: in its user namespace. */
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto gone;
	if (ns_user >= 0 && (fstat(fd, &a) < 0 || fstat(ns_user, &b) < 0 || a.st_ino != b.st_ino ||
			     a.st_dev != b.st_dev)) {
		close(fd);
		goto gone;
	}
	close(fd);
	if (open_namespaces(h, err, errlen) < 0) {
		sq_nsholder_release(h);
		return -1;
	}
	if (sq_pidfd_signal(h->pidfd, 0) < 0)
		goto gone;
	return 0;
gone:
	sq_nsholder_release(h);
	return 1;
}

int sq_nsholder_mask(const struct sq_nsholder *h)
{
	int mask = 0;

	for (int i = 0; i < 3; i++)
		if (h->fd[i] >= 0)
			mask |= kinds[i];
	return mask;
}

int sq_nsholder_join(const struct sq_nsholder *h, char *err, size_t errlen)
{
	for (int i = 0; i < 3; i++)
		if (h->fd[i] >= 0 && setns(h->fd[i], clone_flags[i]) < 0)
			return sq_errf(err, errlen, "cannot join the container's %s namespace: %s",
					sq_ns_name(kinds[i]), strerror(errno));
	return 0;
}

void sq_nsholder_release(struct sq_nsholder *h)
{
	for (int i = 0; i < 3; i++)
		if (h->fd[i] >= 0)
			close(h->fd[i]);
	if (h->owned && h->pid > 0) {
		if (h->pidfd >= 0)
			sq_pidfd_signal(h->pidfd, SIGKILL);
		else
			kill(h->pid, SIGKILL);
		while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (h->pidfd >= 0)
		close(h->pidfd);
	sq_nsholder_init(h);
}
