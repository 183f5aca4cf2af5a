/*
 * squall-keeper: holds one container's runtime for the plugin, outside slurmstepd's
 * process tree, and ends it. See spank/plugin/keeper.h for why and for the protocol.
 *
 *   squall-keeper RUNTIME [ARG...]
 *
 * Started by the plugin (as the job user, in a new session, its parent already gone) with
 * fd 0 /dev/null, 1 and 2 the plugin's captures, fd 3 the control socket (SOCK_SEQPACKET)
 * and fd 4 a pidfd of the slurmstepd that started it. Runs RUNTIME (`enroot start ...`)
 * as its child in a process group of its own, with the job signals ignored, and reports
 * on fd 3 when it has stopped itself (the container is set up) or exited. Then it waits
 * for "stop" on fd 3 (or fd 3 closed), the end of slurmstepd, or the runtime's end, and
 * tears down: SIGCONT lets the stopped runtime exit (Enroot unmounts), SIGKILL after a
 * grace time, then every process left in its session, and when slurmstepd died, every
 * process of the user in the container's mount namespace (its tasks) as well.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "keeper.h"
#include "pidfd.h"
#include "reap.h"

#define PROG "squall-keeper"
#define CONT_GRACE_MS 10000
#define REAP_ROUNDS 150      /* 20 ms apart: 3 s */

/* The signals Slurm sends a step (and a user's `kill -1`): ignored by the keeper and by
 * the runtime it starts. SIGCONT cannot be ignored: keeping the runtime out of
 * slurmstepd's process tree is what keeps it from the runtime. */
static const int job_signals[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM };

static pid_t runtime = -1;
static int sigfd = -1;
static unsigned long long ns_dev, ns_ino;
static int have_ns;

static void say(int sock, const char *text, const int *fds, int nfds)
{
	struct msghdr msg = { 0 };
	struct iovec iov = { (void *)text, strlen(text) };
	char control[CMSG_SPACE(2 * sizeof(int))];

	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (nfds > 0) {
		struct cmsghdr *c;
		memset(control, 0, sizeof(control));
		msg.msg_control = control;
		msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	while (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

static void start_runtime(char **argv)
{
	sigset_t none;

	runtime = fork();
	if (runtime != 0)
		return;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	/* Its own process group: if the keeper is ever killed, the group is orphaned with a
	 * stopped member and the kernel sends it SIGHUP and SIGCONT, so the runtime exits. */
	setpgid(0, 0);
	close(KEEPER_FD_CONTROL);
	close(KEEPER_FD_STEPD);
	close(sigfd);
	execv(argv[0], argv);
	fprintf(stderr, "squall: " PROG " cannot execute %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Collect the runtime's state changes. Returns 'S' stopped, 'X' exited (status in
 * *status), 0 nothing new. */
static int runtime_event(int *status)
{
	siginfo_t si;

	for (;;) {
		struct signalfd_siginfo ssi;
		if (read(sigfd, &ssi, sizeof(ssi)) != (ssize_t)sizeof(ssi))
			break;
	}
	if (runtime <= 0)
		return 0;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)runtime, &si, WEXITED | WSTOPPED | WNOHANG) < 0 || si.si_pid == 0)
		return 0;
	if (si.si_code == CLD_STOPPED)
		return 'S';
	if (si.si_code == CLD_EXITED)
		*status = (si.si_status & 0xff) << 8;
	else
		*status = si.si_status & 0x7f;   /* killed or dumped: as waitpid's WTERMSIG */
	runtime = -1;
	return 'X';
}

static void nap_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&t, NULL);
}

/* End the container; never returns. */
static void teardown(int stepd_gone)
{
	int status;

	if (stepd_gone && have_ns) {
		/* Nobody will end the tasks that joined the container: they go with it. */
		sq_reap_mntns(ns_dev, ns_ino, (long)getuid(), (long)runtime);
	}
	if (runtime > 0) {
		struct pollfd p = { sigfd, POLLIN, 0 };
		int waited = 0;

		/* The runtime's first process stopped itself: let it run on to its exit, and
		 * the runtime takes its mounts down as it does at the end of any container. */
		kill(runtime, SIGCONT);
		while (runtime > 0 && waited < CONT_GRACE_MS) {
			if (runtime_event(&status) == 'X')
				break;
			poll(&p, 1, 50);
			waited += 50;
		}
		if (runtime > 0) {
			kill(runtime, SIGKILL);
			while (waitpid(runtime, &status, 0) < 0 && errno == EINTR)
				;
			runtime = -1;
		}
	}
	/* Whatever the runtime left in the session (FUSE daemons, Enroot's shim, hooks). */
	for (int round = 0; round < REAP_ROUNDS; round++) {
		int n = sq_reap_session((long)getpid(), (long)getuid(), -1);
		if (stepd_gone && have_ns)
			n += sq_reap_mntns(ns_dev, ns_ino, (long)getuid(), -1);
		while (waitpid(-1, &status, WNOHANG) > 0)
			;
		if (n <= 0)
			break;
		nap_ms(20);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	struct pollfd fds[3];
	sigset_t chld;
	char text[96];
	int own[2], status = 0, stopped = 0;
	int stepd = fcntl(KEEPER_FD_STEPD, F_GETFD) >= 0 ? KEEPER_FD_STEPD : -1;

	if (argc < 2 || fcntl(KEEPER_FD_CONTROL, F_GETFD) < 0) {
		fprintf(stderr, "squall: " PROG " is started by the squall SPANK plugin, with the "
			"runtime's command line and its control socket on fd %d\n", KEEPER_FD_CONTROL);
		return 2;
	}
	for (size_t i = 0; i < sizeof(job_signals) / sizeof(job_signals[0]); i++)
		signal(job_signals[i], SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) {
		fprintf(stderr, "squall: " PROG ": signalfd: %s\n", strerror(errno));
		return 1;
	}
	start_runtime(argv + 1);
	if (runtime < 0) {
		fprintf(stderr, "squall: " PROG " cannot fork the runtime: %s\n", strerror(errno));
		return 1;
	}
	own[0] = sq_pidfd_open(getpid());
	own[1] = sq_pidfd_open(runtime);
	snprintf(text, sizeof(text), KEEPER_MSG_STARTED " %d %d", (int)getpid(), (int)runtime);
	say(KEEPER_FD_CONTROL, text, own, (own[0] >= 0 && own[1] >= 0) ? 2 : 0);
	close(own[0]);
	close(own[1]);

	fds[0] = (struct pollfd){ KEEPER_FD_CONTROL, POLLIN, 0 };
	fds[1] = (struct pollfd){ sigfd, POLLIN, 0 };
	fds[2] = (struct pollfd){ stepd, POLLIN, 0 };
	for (;;) {
		int ev;

		if (poll(fds, stepd >= 0 ? 3 : 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			teardown(0);
		}
		if (fds[1].revents) {
			ev = runtime_event(&status);
			if (ev == 'S' && !stopped) {
				stopped = 1;
				have_ns = sq_mntns_of((long)runtime, &ns_dev, &ns_ino) == 0;
				say(KEEPER_FD_CONTROL, KEEPER_MSG_READY, NULL, 0);
			} else if (ev == 'X') {
				if (!stopped) {
					snprintf(text, sizeof(text), KEEPER_MSG_EXITED " %d", status);
					say(KEEPER_FD_CONTROL, text, NULL, 0);
				}
				teardown(0);
			}
		}
		if (stepd >= 0 && fds[2].revents)
			teardown(1);
		if (fds[0].revents) {
			char buf[64];
			ssize_t n = recv(KEEPER_FD_CONTROL, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n > 0)
				teardown(0);   /* "stop": the step is over */
			/* Closed without a word: slurmstepd is going (its files close before its
			 * pidfd says so), or the plugin failed. */
			teardown(stepd >= 0 && poll(&fds[2], 1, 2000) > 0);
		}
	}
}
