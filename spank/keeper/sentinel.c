/* sentinel.c: see sentinel.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sentinel.h"

/* Same namespace as ours (dev and inode of the nsfs files)? */
static int same_ns(int fd, const char *own)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && stat(own, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

static void sentinel_main(int in, pid_t parent)
{
	char buf[32], path[64];
	ssize_t n;
	long pid;
	int user, mnt;

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != parent)
		_exit(0);
	for (int fd = 0; fd < 1024; fd++)
		if (fd != in)
			close(fd);
	do
		n = read(in, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		_exit(0);
	buf[n] = '\0';
	pid = strtol(buf, NULL, 10);
	close(in);
	snprintf(path, sizeof(path), "/proc/%ld/ns/user", pid);
	user = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", pid);
	mnt = open(path, O_RDONLY | O_CLOEXEC);
	if (user < 0 || mnt < 0)
		_exit(0);
	if (!same_ns(user, "/proc/self/ns/user") && setns(user, CLONE_NEWUSER) < 0)
		_exit(0);
	/* The namespace's root is the container's root: its /proc has no /.lock. */
	if (setns(mnt, CLONE_NEWNS) < 0 || chdir("/proc") < 0 || chroot(".") < 0)
		_exit(0);
	close(user);
	close(mnt);
	for (;;)
		pause();
}

void sq_sentinel_fork(struct sq_sentinel *s)
{
	pid_t parent = getpid();
	int p[2];

	s->pid = -1;
	s->go = -1;
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	s->pid = fork();
	if (s->pid == 0)
		sentinel_main(p[0], parent);
	close(p[0]);
	if (s->pid < 0)
		close(p[1]);
	else
		s->go = p[1];
}

void sq_sentinel_place(struct sq_sentinel *s, pid_t runtime)
{
	char text[32];
	int n;

	if (s->go < 0)
		return;
	/* Only the lower PID stands for the namespace (PIDs wrapped around: nothing to do). */
	if (s->pid > 0 && s->pid < runtime) {
		n = snprintf(text, sizeof(text), "%ld\n", (long)runtime);
		if (write(s->go, text, (size_t)n) != n) {
			/* it then exits: the first process stays listed, nothing else changes */
		}
	}
	close(s->go);
	s->go = -1;
}
