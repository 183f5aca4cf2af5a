/* keeper_client.c: see keeper_client.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "keeper_client.h"
#include "pidfd.h"
#include "procstat.h"
#include "reap.h"
#include "strbuf.h"

#define ATTACH_WAIT_S 300     /* a kept container being started by another step */

/* The keeper's own grace (SIGCONT, then SIGKILL after 10 s) plus its sweep. */
#define STOP_WAIT_MS 15000

void sq_keeper_init(struct sq_keeper *k)
{
	k->pid = -1;
	k->starttime = 0;
	k->pidfd = -1;
	k->sock = -1;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One message from the keeper within the deadline (<= 0: none). Returns its length, 0 when
 * the keeper closed the socket, -1 on timeout or error. fds (up to 2) received with it are
 * stored in fds[], else left at -1. */
static ssize_t hear(int sock, char *buf, size_t len, int fds[2], double deadline)
{
	struct msghdr msg = { 0 };
	struct iovec iov = { buf, len - 1 };
	char control[CMSG_SPACE(2 * sizeof(int))];
	ssize_t n;

	for (;;) {
		struct pollfd p = { sock, POLLIN, 0 };
		int wait_ms = -1, r;

		if (deadline > 0) {
			double left = deadline - now_s();
			if (left <= 0)
				return -1;
			wait_ms = (int)(left * 1000) + 1;
		}
		r = poll(&p, 1, wait_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		break;
	}
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof(control);
	do {
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int got[2] = { -1, -1 };
			memcpy(got, CMSG_DATA(c), (nfds > 2 ? 2 : nfds) * sizeof(int));
			for (size_t i = 0; i < nfds && i < 2; i++) {
				if (fds != NULL)
					fds[i] = got[i];
				else
					close(got[i]);
			}
		}
	}
	return n;
}

static void start_failed(const struct sq_child *capture, const char *why, char *err,
			 size_t errlen)
{
	sq_child_failure(capture, "container start", why, err, errlen);
}

/* Start the keeper at keeper_path with its control socket and this slurmstepd's pidfd
 * (protocol.h); k->sock is the plugin's end. 0 ok, -1 with err. */
static int spawn_keeper(struct sq_keeper *k, const char *keeper_path,
			const char *const *keeper_args, char *const argv[], char *const envp[],
			const struct sq_cred *cred, struct sq_child *capture, char *err,
			size_t errlen)
{
	char **kargv;
	int pair[2] = { -1, -1 }, pass[2] = { -1, -1 }, n = 0, nk = 0, rv = -1;

	while (argv[n] != NULL)
		n++;
	while (keeper_args != NULL && keeper_args[nk] != NULL)
		nk++;
	kargv = calloc((size_t)(n + nk) + 2, sizeof(char *));
	if (kargv == NULL || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
		sq_errf(err, errlen, "cannot prepare the container start: %s", strerror(errno));
		goto fail;
	}
	kargv[0] = (char *)keeper_path;
	if (nk > 0)
		memcpy(kargv + 1, keeper_args, (size_t)nk * sizeof(char *));
	memcpy(kargv + 1 + nk, argv, (size_t)n * sizeof(char *));
	pass[KEEPER_FD_CONTROL - SQ_FD_PASSED] = pair[1];
	/* This slurmstepd, as the keeper sees it: its end means the step's tasks are
	 * orphaned and the container must go with them. */
	pass[KEEPER_FD_STEPD - SQ_FD_PASSED] = sq_pidfd_open(getpid());
	if (sq_spawn_detached(keeper_path, kargv, envp, cred, pass, pass[1] >= 0 ? 2 : 1,
			      capture, err, errlen) < 0)
		goto fail;
	k->sock = pair[0];
	pair[0] = -1;
	rv = 0;
fail:
	if (pair[0] >= 0)
		close(pair[0]);
	if (pair[1] >= 0)
		close(pair[1]);
	if (pass[1] >= 0)
		close(pass[1]);
	free(kargv);
	return rv;
}

int sq_keeper_start(struct sq_keeper *k, const char *keeper_path,
		    const char *const *keeper_args, char *const argv[],
		    char *const envp[], const struct sq_cred *cred, struct sq_child *capture,
		    int timeout_s, pid_t *runtime_pid, int *runtime_pidfd, char *err,
		    size_t errlen)
{
	char buf[128];
	int got[2] = { -1, -1 }, kpid = 0, rpid = 0;
	double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
	ssize_t len;

	*runtime_pid = -1;
	*runtime_pidfd = -1;
	if (spawn_keeper(k, keeper_path, keeper_args, argv, envp, cred, capture, err,
			 errlen) < 0)
		return -1;

	len = hear(k->sock, buf, sizeof(buf), got, deadline);
	if (len <= 0 || sscanf(buf, KEEPER_MSG_STARTED " %d %d", &kpid, &rpid) != 2 ||
	    got[0] < 0 || got[1] < 0) {
		start_failed(capture, len == 0 ? "its keeper exited" : "no word from its keeper",
			     err, errlen);
		goto fail;
	}
	k->pid = kpid;
	k->pidfd = got[0];
	*runtime_pid = rpid;
	*runtime_pidfd = got[1];
	if (sq_pidfd_signal(k->pidfd, 0) == 0) {
		char state;
		sq_procstat_read(kpid, &state, &k->starttime);
	}

	len = hear(k->sock, buf, sizeof(buf), NULL, deadline);
	if (len > 0 && strcmp(buf, KEEPER_MSG_READY) == 0)
		return 0;
	if (len > 0 && strncmp(buf, KEEPER_MSG_EXITED " ", strlen(KEEPER_MSG_EXITED) + 1) == 0) {
		char why[64];
		sq_status_text(atoi(buf + strlen(KEEPER_MSG_EXITED) + 1), why, sizeof(why));
		start_failed(capture, why, err, errlen);
	} else if (len < 0 && deadline > 0 && now_s() >= deadline) {
		sq_errf(err, errlen, "container start failed: the runtime did not reach the "
			"container's first command within %d s (a wrapper around enroot must exec "
			"it, not run it as a child)", timeout_s);
	} else {
		start_failed(capture, "its keeper went away", err, errlen);
	}
fail:
	if (got[1] >= 0 && *runtime_pidfd < 0)
		close(got[1]);
	if (got[0] >= 0 && k->pidfd < 0)
		close(got[0]);
	if (*runtime_pidfd >= 0)
		close(*runtime_pidfd);
	*runtime_pidfd = -1;
	*runtime_pid = -1;
	sq_keeper_stop(k, cred->uid);
	return -1;
}

void sq_keeper_stop(struct sq_keeper *k, uid_t uid)
{
	if (k->sock >= 0) {
		if (send(k->sock, KEEPER_MSG_STOP, strlen(KEEPER_MSG_STOP), MSG_NOSIGNAL) < 0) {
			/* it is gone already: the wait below returns at once */
		}
	}
	if (k->pidfd >= 0 && sq_pidfd_wait_exit(k->pidfd, STOP_WAIT_MS) == 0) {
		sq_pidfd_signal(k->pidfd, SIGKILL);
		sq_pidfd_wait_exit(k->pidfd, 2000);
		/* It did not sweep its session: what is left there keeps the session id
		 * allocated, so it names the container's processes and nothing else. */
		for (int round = 0; round < 50 && sq_reap_session(k->pid, (long)uid, -1) > 0;
		     round++)
			usleep(20000);
	}
	if (k->sock >= 0)
		close(k->sock);
	if (k->pidfd >= 0)
		close(k->pidfd);
	sq_keeper_init(k);
}

void sq_keeper_leave(struct sq_keeper *k)
{
	if (k->sock >= 0 &&
	    send(k->sock, KEEPER_MSG_BYE, strlen(KEEPER_MSG_BYE), MSG_NOSIGNAL) < 0) {
		/* gone already */
	}
	if (k->sock >= 0)
		close(k->sock);
	if (k->pidfd >= 0)
		close(k->pidfd);
	sq_keeper_init(k);
}

int sq_keeper_ask_attach(int sock, struct sq_keeper *k, pid_t *pid, int *pidfd, char *err,
			 size_t errlen)
{
	char buf[128], control[CMSG_SPACE(2 * sizeof(int))];
	struct iovec iov = { buf, sizeof(buf) - 1 };
	struct msghdr msg = { 0 };
	struct pollfd p = { sock, POLLIN, 0 };
	int fds[2] = { -1, -1 }, kpid = 0, rpid = 0;
	ssize_t n;

	if (send(sock, KEEPER_MSG_ATTACH, strlen(KEEPER_MSG_ATTACH), MSG_NOSIGNAL) < 0 ||
	    poll(&p, 1, ATTACH_WAIT_S * 1000) <= 0) {
		sq_errf(err, errlen, "the job's kept container did not answer: %s",
			errno ? strerror(errno) : "timed out");
		return -1;
	}
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof(control);
	n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	if (n > 0) {
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		buf[n] = '\0';
		if (c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(2 * sizeof(int)))
			memcpy(fds, CMSG_DATA(c), sizeof(fds));
	}
	if (n <= 0 || sscanf(buf, KEEPER_MSG_ATTACHED " %d %d", &kpid, &rpid) != 2 ||
	    fds[0] < 0 || fds[1] < 0) {
		if (fds[0] >= 0)
			close(fds[0]);
		if (fds[1] >= 0)
			close(fds[1]);
		sq_errf(err, errlen, "the job's kept container ended while this step joined it");
		return -1;
	}
	k->pid = kpid;
	k->pidfd = fds[0];
	k->sock = sock;
	*pid = rpid;
	*pidfd = fds[1];
	return 0;
}

void sq_keeper_tell_layer(const struct sq_keeper *k, int ns_mnt, unsigned long long dev,
			  unsigned long long ino)
{
	char text[96], control[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { text, 0 };
	struct msghdr msg = { 0 };
	struct cmsghdr *cm;

	snprintf(text, sizeof(text), KEEPER_MSG_LAYER " %llu %llu", dev, ino);
	iov.iov_len = strlen(text);
	memset(control, 0, sizeof(control));
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof(control);
	cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &ns_mnt, sizeof(int));
	if (k->sock < 0 || sendmsg(k->sock, &msg, MSG_NOSIGNAL) < 0) {
		/* the keeper ends it with the job anyway */
	}
}
