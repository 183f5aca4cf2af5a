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
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "extracted.h"
#include "shared_copy.h"
#include "protocol.h"
#include "pidfd.h"
#include "reap.h"
#include "sentinel.h"

#define PROG "squall-keeper"
#define CONT_GRACE_MS 10000
#define REAP_ROUNDS 150      /* 20 ms apart: 3 s */

/* The signals Slurm sends a step (and a user's `kill -1`): ignored by the keeper and by
 * the runtime it starts. SIGCONT cannot be ignored: keeping the runtime out of
 * slurmstepd's process tree is what keeps it from the runtime. */
static const int job_signals[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM };

/* One step using the container: its connection and the mount namespace of its layer. */
struct client {
	int fd;
	int waiting;            /* asked to attach before the runtime was ready */
	int layer;              /* a descriptor of its layer's mount namespace, or -1 */
};

#define MAX_CLIENTS 256

/* The node-local cache of extracted images (extracted.h): start from it, or fill it. */
struct cache_use {
	const char *dir, *key, *data;
};
struct cache_fill {
	const char *dir, *key, *image, *tool;
	unsigned long long max;
};
/* --share MODE JOB.STEP SBCAST WAIT_S: the step's image read once for its nodes
 * (shared_copy.h): "send" (the step's first node, filling), "recv" (the others, filling,
 * waiting at most WAIT_S seconds for the copy to begin), "none" (the first node, whose
 * tree is there: tells the others to read the image themselves). */
struct cache_share {
	const char *mode, *jobstep, *sbcast;
	int wait_s;
};

/* Everything the keeper knows: its settings and the state of its loop. */
struct keeper {
	int job;               /* --job: kept for the job, steps connect to listen_path */
	int idle_s;            /* --job: end after this long without a step */
	int stepd;             /* the slurmstepd's pidfd (KEEPER_FD_STEPD), or -1 */
	int stopped;           /* the runtime's first process stopped itself: ready */
	int status;            /* its exit status, once it exited */
	double idle_since;     /* when the last step left, or -1 */
	pid_t runtime;         /* the runtime's first process, or -1 */
	int sigfd;             /* SIGCHLD */
	/* The container's mount namespace, held from the runtime's stop on: while it is open
	 * the namespace's number is not freed, so reaping by it never reaches a namespace
	 * made since (the kernel gives a freed one's number to the next at once; issue 30). */
	int ns_fd;
	struct cache_use use;
	struct cache_fill fill;
	struct cache_share share;
	struct sq_sentinel sentinel;   /* the container's stand-in in `enroot list -f` */
	const char *listen_path;
	int listen_fd;
	struct client clients[MAX_CLIENTS];
	int nclients;
};

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

static void start_runtime(struct keeper *k, char **argv)
{
	sigset_t none;

	k->runtime = fork();
	if (k->runtime != 0)
		return;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	/* Its own process group: if the keeper is ever killed, the group is orphaned with a
	 * stopped member and the kernel sends it SIGHUP and SIGCONT, so the runtime exits. */
	setpgid(0, 0);
	close(KEEPER_FD_CONTROL);
	close(KEEPER_FD_STEPD);
	close(k->sigfd);
	if (k->use.dir != NULL) {
		if (sq_extracted_mount(k->use.dir, k->use.key, k->use.data, "rootfs") < 0)
			_exit(126);
		setenv("ENROOT_DATA_PATH", k->use.data, 1);
	}
	execv(argv[0], argv);
	fprintf(stderr, "squall: " PROG " cannot execute %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Collect the runtime's state changes. Returns 'S' stopped, 'X' exited (status in
 * *status), 0 nothing new. */
static int runtime_event(struct keeper *k, int *status)
{
	siginfo_t si;

	for (;;) {
		struct signalfd_siginfo ssi;
		if (read(k->sigfd, &ssi, sizeof(ssi)) != (ssize_t)sizeof(ssi))
			break;
	}
	if (k->runtime <= 0)
		return 0;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)k->runtime, &si, WEXITED | WSTOPPED | WNOHANG) < 0 ||
	    si.si_pid == 0)
		return 0;
	if (si.si_code == CLD_STOPPED)
		return 'S';
	if (si.si_code == CLD_EXITED)
		*status = (si.si_status & 0xff) << 8;
	else
		*status = si.si_status & 0x7f;   /* killed or dumped: as waitpid's WTERMSIG */
	k->runtime = -1;
	return 'X';
}

/* Extract the image into the cache in the background, in the keeper's session (so it
 * ends with the container when the job does, leaving a partial tree KEY.part that the
 * next job's extraction resumes), yielding to the job's steps (extracted.h). */
static int fill_from(const struct keeper *k)
{
	const struct cache_share *sh = &k->share;
	char copy[PATH_MAX] = "";
	int rv, hold = -1;

	/* The step's copy is this keeper's until its extraction took it (shared_copy.h). */
	if (sh->mode != NULL && sh->jobstep != NULL)
		hold = sq_copy_hold(k->fill.dir, sh->jobstep);
	if (sh->mode != NULL && strcmp(sh->mode, "send") == 0)
		sq_copy_send(k->fill.dir, k->fill.key, k->fill.image, sh->jobstep, sh->sbcast, 0,
			     copy, sizeof(copy));
	else if (sh->mode != NULL && strcmp(sh->mode, "recv") == 0)
		sq_copy_receive(k->fill.dir, k->fill.image, sh->jobstep, sh->wait_s, copy,
				sizeof(copy));
	rv = sq_extracted_build(k->fill.dir, k->fill.key, k->fill.image, copy[0] ? copy : NULL,
				k->fill.tool, k->fill.max);
	if (hold >= 0)
		sq_copy_release(k->fill.dir, sh->jobstep, hold);
	return rv == 0 ? 0 : 1;
}

static void fill_cache(const struct keeper *k)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (fork() == 0) {
			close(KEEPER_FD_CONTROL);
			close(k->sigfd);
			if (k->fill.dir != NULL)
				_exit(fill_from(k));
			/* The first node's tree is there: the others read the image themselves. */
			_exit(sq_copy_send(k->use.dir, k->use.key, "", k->share.jobstep,
					   k->share.sbcast, 1, NULL, 0));
		}
		_exit(0);
	}
	while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&t, NULL);
}

/* End the container; never returns. */
static void teardown(struct keeper *k, int stepd_gone)
{
	int status;

	if (stepd_gone && k->ns_fd >= 0) {
		/* Nobody will end the tasks that joined the container: they go with it. */
		sq_reap_mntns(k->ns_fd, (long)getuid(), (long)k->runtime);
	} else if (k->ns_fd >= 0) {
		/* Not reaped by: let the namespace go with the runtime, as without a keeper. */
		close(k->ns_fd);
		k->ns_fd = -1;
	}
	if (k->runtime > 0) {
		struct pollfd p = { k->sigfd, POLLIN, 0 };
		int waited = 0;

		/* The runtime's first process stopped itself: let it run on to its exit, and
		 * the runtime takes its mounts down as it does at the end of any container. */
		kill(k->runtime, SIGCONT);
		while (k->runtime > 0 && waited < CONT_GRACE_MS) {
			if (runtime_event(k, &status) == 'X')
				break;
			poll(&p, 1, 50);
			waited += 50;
		}
		if (k->runtime > 0) {
			kill(k->runtime, SIGKILL);
			while (waitpid(k->runtime, &status, 0) < 0 && errno == EINTR)
				;
			k->runtime = -1;
		}
	}
	/* Whatever the runtime left in the session (FUSE daemons, Enroot's shim, hooks). */
	for (int round = 0; round < REAP_ROUNDS; round++) {
		int n = sq_reap_session((long)getpid(), (long)getuid(), -1);
		if (k->ns_fd >= 0) {
			int r = sq_reap_mntns(k->ns_fd, (long)getuid(), -1);
			n += r > 0 ? r : 0;
		}
		while (waitpid(-1, &status, WNOHANG) > 0)
			;
		if (n <= 0)
			break;
		nap_ms(20);
	}
	_exit(0);
}


static void attach_reply(const struct keeper *k, struct client *c)
{
	char text[96];
	int own[2];

	own[0] = sq_pidfd_open(getpid());
	own[1] = sq_pidfd_open(k->runtime);
	snprintf(text, sizeof(text), KEEPER_MSG_ATTACHED " %d %d", (int)getpid(), (int)k->runtime);
	say(c->fd, text, own, (own[0] >= 0 && own[1] >= 0) ? 2 : 0);
	if (own[0] >= 0)
		close(own[0]);
	if (own[1] >= 0)
		close(own[1]);
	c->waiting = 0;
}

/* The step is gone without saying goodbye: its tasks are orphans in its layer. */
static void drop_client(struct keeper *k, int i, int orphaned)
{
	struct client *c = &k->clients[i];

	if (orphaned && c->layer >= 0)
		sq_reap_mntns(c->layer, (long)getuid(), -1);
	if (c->layer >= 0)
		close(c->layer);
	close(c->fd);
	*c = k->clients[--k->nclients];
}

static void end_all(struct keeper *k, int stepd_gone)
{
	for (int i = k->nclients - 1; i >= 0; i--)
		drop_client(k, i, 1);
	if (k->listen_path != NULL)
		unlink(k->listen_path);
	teardown(k, stepd_gone);
}

static void accept_client(struct keeper *k)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int fd = accept4(k->listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	/* Only the job user (and root) may use the container. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    (cred.uid != getuid() && cred.uid != 0) || k->nclients == MAX_CLIENTS) {
		close(fd);
		return;
	}
	k->clients[k->nclients++] = (struct client){ fd, 0, -1 };
}

/* A message from sock without waiting, and the descriptor sent with it (else *fd = -1).
 * Its length, 0 at the end, -1 when there is nothing yet. */
static ssize_t hear_with_fd(int sock, char *buf, size_t len, int *fd)
{
	char control[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { buf, len - 1 };
	struct msghdr msg = { 0 };
	ssize_t n;

	*fd = -1;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control;
	msg.msg_controllen = sizeof(control);
	n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	buf[n] = '\0';
	return n;
}

/* "layer DEV INO" with a descriptor of the layer's mount namespace: the descriptor is
 * what names it (a number alone may be a namespace made since), so it is kept. */
static void take_layer(struct client *c, int fd)
{
	unsigned long long dev, ino;

	if (fd < 0 || sq_mntns_fd_id(fd, &dev, &ino) < 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (c->layer >= 0)
		close(c->layer);
	c->layer = fd;
}

/* A message (or the end) from client i. Returns 1 when the container must end. */
static int client_says(struct keeper *k, int i)
{
	char buf[128];
	int fd;
	ssize_t n = hear_with_fd(k->clients[i].fd, buf, sizeof(buf), &fd);

	if (fd >= 0 && strncmp(buf, KEEPER_MSG_LAYER " ", strlen(KEEPER_MSG_LAYER) + 1) != 0) {
		close(fd);
		fd = -1;
	}

	if (n < 0)
		return 0;                 /* EAGAIN, EINTR: nothing yet */
	if (n == 0) {
		if (!k->job) {
			/* Closed without a word: slurmstepd is going (its files close before
			 * its pidfd says so), or the plugin failed. */
			struct pollfd p = { k->stepd, POLLIN, 0 };
			end_all(k, k->stepd >= 0 && poll(&p, 1, 2000) > 0);
		}
		drop_client(k, i, 1);
		return 0;
	}
	if (strcmp(buf, KEEPER_MSG_STOP) == 0)
		return 1;
	if (strcmp(buf, KEEPER_MSG_ATTACH) == 0) {
		if (k->stopped)
			attach_reply(k, &k->clients[i]);
		else
			k->clients[i].waiting = 1;
	} else if (strncmp(buf, KEEPER_MSG_LAYER " ", strlen(KEEPER_MSG_LAYER) + 1) == 0) {
		take_layer(&k->clients[i], fd);
	} else if (strcmp(buf, KEEPER_MSG_BYE) == 0) {
		drop_client(k, i, 0);
	}
	return 0;
}

static int listen_on(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	mode_t mask;
	int fd, bound;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	unlink(path);   /* a dead keeper's; the plugin holds the job's lock for this key */
	/* The socket is the user's alone; only for the bind: what the keeper makes after it
	 * (the extraction, the runtime and the container's processes) has the user's umask. */
	mask = umask(077);
	bound = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(mask);
	if (bound < 0 || listen(fd, 64) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The keeper's own arguments; returns the index of the runtime's command line, or -1. */
static int parse_args(struct keeper *k, int argc, char **argv)
{
	int first = 1;

	if (argc >= 4 && strcmp(argv[1], "--job") == 0) {
		k->job = 1;
		k->listen_path = argv[2];
		k->idle_s = atoi(argv[3]);
		first = 4;
	}
	if (argc >= first + 4 && strcmp(argv[first], "--use-cache") == 0) {
		k->use.dir = argv[first + 1];
		k->use.key = argv[first + 2];
		k->use.data = argv[first + 3];
		first += 4;
	} else if (argc >= first + 6 && strcmp(argv[first], "--fill-cache") == 0) {
		k->fill.dir = argv[first + 1];
		k->fill.key = argv[first + 2];
		k->fill.image = argv[first + 3];
		k->fill.tool = argv[first + 4];
		k->fill.max = strtoull(argv[first + 5], NULL, 10);
		first += 6;
	}
	if (argc >= first + 5 && strcmp(argv[first], "--share") == 0) {
		k->share.mode = argv[first + 1];
		k->share.jobstep = argv[first + 2];
		k->share.sbcast = argv[first + 3];
		k->share.wait_s = atoi(argv[first + 4]);
		first += 5;
	}
	return argc > first && fcntl(KEEPER_FD_CONTROL, F_GETFD) >= 0 ? first : -1;
}

/* Job signals ignored, SIGCHLD through a signalfd, the job's socket, the control client,
 * the extracted tree held. 0 ok; -1 said on stderr. */
static int set_up(struct keeper *k)
{
	sigset_t chld;

	for (size_t i = 0; i < sizeof(job_signals) / sizeof(job_signals[0]); i++)
		signal(job_signals[i], SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	k->sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	if (k->sigfd < 0) {
		fprintf(stderr, "squall: " PROG ": signalfd: %s\n", strerror(errno));
		return -1;
	}
	if (k->job) {
		/* Kept for the job: the starting step is one user among others. */
		if (k->stepd >= 0)
			close(k->stepd);
		k->stepd = -1;
		k->listen_fd = listen_on(k->listen_path);
		if (k->listen_fd < 0) {
			fprintf(stderr, "squall: " PROG " cannot listen on %s: %s\n", k->listen_path,
				strerror(errno));
			return -1;
		}
	}
	k->clients[k->nclients++] = (struct client){ KEEPER_FD_CONTROL, 0, -1 };
	/* The tree stays in the cache as long as this container may read it. */
	if (k->use.dir != NULL && sq_extracted_hold(k->use.dir, k->use.key) < 0) {
		fprintf(stderr, "squall: " PROG ": the extracted image %s/%s is gone\n",
			k->use.dir, k->use.key);
		return -1;
	}
	return 0;
}

/* Start the runtime and tell the plugin: "started KPID PID" + pidfds (protocol.h).
 * 0 ok; -1 said on stderr. */
static int start_and_announce(struct keeper *k, char **argv)
{
	char text[96];
	int own[2];

	sq_sentinel_fork(&k->sentinel);   /* before the runtime: the lower PID */
	start_runtime(k, argv);
	if (k->runtime < 0) {
		fprintf(stderr, "squall: " PROG " cannot fork the runtime: %s\n", strerror(errno));
		return -1;
	}
	own[0] = sq_pidfd_open(getpid());
	own[1] = sq_pidfd_open(k->runtime);
	snprintf(text, sizeof(text), KEEPER_MSG_STARTED " %d %d", (int)getpid(), (int)k->runtime);
	say(KEEPER_FD_CONTROL, text, own, (own[0] >= 0 && own[1] >= 0) ? 2 : 0);
	close(own[0]);
	close(own[1]);
	return 0;
}

/* How long poll may wait: a container kept for the job, ready and unused, ends once
 * idle_s have passed (never returns then); -1 otherwise. */
static int idle_wait_ms(struct keeper *k)
{
	int wait_ms;

	if (!(k->job && k->nclients == 0 && k->stopped)) {
		k->idle_since = -1;
		return -1;
	}
	if (k->idle_since < 0)
		k->idle_since = now_s();
	wait_ms = (int)((k->idle_since + k->idle_s - now_s()) * 1000);
	if (wait_ms <= 0)
		end_all(k, 0);   /* nobody used it for idle_s: the job is done with it */
	return wait_ms;
}

/* The runtime stopped itself (ready: answer the steps waiting) or exited (the end). */
static void on_runtime(struct keeper *k)
{
	char text[96];
	int ev = runtime_event(k, &k->status);

	if (ev == 'S' && !k->stopped) {
		k->stopped = 1;
		k->ns_fd = sq_mntns_pin((long)k->runtime, (long)getuid());
		sq_sentinel_place(&k->sentinel, k->runtime);
		say(KEEPER_FD_CONTROL, KEEPER_MSG_READY, NULL, 0);
		for (int i = 0; i < k->nclients; i++)
			if (k->clients[i].waiting)
				attach_reply(k, &k->clients[i]);
		if (k->fill.dir != NULL ||
		    (k->use.dir != NULL && k->share.mode != NULL &&
		     strcmp(k->share.mode, "none") == 0))
			fill_cache(k);
	} else if (ev == 'X') {
		if (!k->stopped) {
			snprintf(text, sizeof(text), KEEPER_MSG_EXITED " %d", k->status);
			say(KEEPER_FD_CONTROL, text, NULL, 0);
		}
		end_all(k, 0);
	}
}

/* Until the container ends: the runtime's events, slurmstepd's end, steps. */
static void serve(struct keeper *k)
{
	struct pollfd fds[3 + MAX_CLIENTS];

	for (;;) {
		int nfds = 0, wait_ms;

		fds[nfds++] = (struct pollfd){ k->sigfd, POLLIN, 0 };
		fds[nfds++] = (struct pollfd){ k->stepd, POLLIN, 0 };
		fds[nfds++] = (struct pollfd){ k->listen_fd, POLLIN, 0 };
		for (int i = 0; i < k->nclients; i++)
			fds[nfds++] = (struct pollfd){ k->clients[i].fd, POLLIN, 0 };
		wait_ms = idle_wait_ms(k);
		if (poll(fds, (nfds_t)nfds, wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			end_all(k, 0);
		}
		if (fds[0].revents)
			on_runtime(k);
		if (k->stepd >= 0 && fds[1].revents)
			end_all(k, 1);
		if (k->listen_fd >= 0 && fds[2].revents)
			accept_client(k);
		/* Clients from the end: drop_client moves the last one into the slot. */
		for (int i = nfds - 4; i >= 0; i--)
			if (i < k->nclients && fds[3 + i].fd == k->clients[i].fd &&
			    fds[3 + i].revents && client_says(k, i))
				end_all(k, 0);
	}
}

int main(int argc, char **argv)
{
	static struct keeper k = { .stepd = -1, .idle_since = -1, .runtime = -1, .sigfd = -1,
				   .ns_fd = -1, .sentinel = { -1, -1 }, .listen_fd = -1 };
	int first;

	k.stepd = fcntl(KEEPER_FD_STEPD, F_GETFD) >= 0 ? KEEPER_FD_STEPD : -1;
	first = parse_args(&k, argc, argv);
	if (first < 0) {
		fprintf(stderr, "squall: " PROG " is started by the squall SPANK plugin, with the "
			"runtime's command line and its control socket on fd %d\n", KEEPER_FD_CONTROL);
		return 2;
	}
	if (set_up(&k) < 0 || start_and_announce(&k, argv + first) < 0)
		return 1;
	serve(&k);
	return 0;
}
