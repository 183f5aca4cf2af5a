/* keeper.c: see keeper.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "keeper.h"
#include "pidfd.h"
#include "procstat.h"
#include "reap.h"
#include "safeopen.h"
#include "smallio.h"
#include "strbuf.h"

#define ATTACH_WAIT_S 300     /* a kept container being started by another step */

/* The keeper's own grace (SIGCONT, then SIGKILL after 10 s) plus its sweep. */
#define STOP_WAIT_MS 15000
#define RECORD_PREFIX "keeper-"

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

static void record_path(char *buf, size_t len, const char *dir, uint32_t jobid,
			const char *what)
{
	snprintf(buf, len, "%s/" RECORD_PREFIX "%u.%s", dir, (unsigned)jobid, what);
}

int sq_keeper_record(const char *dir, uint32_t jobid, const char *what,
		     const struct sq_keeper *k, char *err, size_t errlen)
{
	char path[PATH_MAX], line[96];

	if (sq_running_format((long)k->pid, k->starttime, line, sizeof(line)) < 0)
		return sq_errf(err, errlen, "cannot format the keeper record");
	record_path(path, sizeof(path), dir, jobid, what);
	if (sq_write_record(path, line) == 0)
		return 0;
	return sq_errf(err, errlen, "cannot record the container's keeper in %s: %s", dir,
		       strerror(errno));
}

void sq_keeper_forget(const char *dir, uint32_t jobid, const char *what)
{
	char path[PATH_MAX];

	record_path(path, sizeof(path), dir, jobid, what);
	unlink(path);
}

static void layer_path(char *buf, size_t len, const char *dir, uint32_t jobid, uint32_t stepid)
{
	snprintf(buf, len, "%s/layer-%u.%u", dir, (unsigned)jobid, (unsigned)stepid);
}

/* A named container's: its runtime name starts with "pyxis_", a step's with a digit. */
static void named_layer_path(char *buf, size_t len, const char *dir, const char *name)
{
	snprintf(buf, len, "%s/layer-%s", dir, name);
}

/* Written as the plugin's other records are (temporary, then renamed): a reader never
 * sees half a line, and a link planted at the name is replaced, never followed. */
static int write_layer(const char *path, unsigned long long dev, unsigned long long ino)
{
	char line[64];

	snprintf(line, sizeof(line), "%llu %llu\n", dev, ino);
	return sq_write_record(path, line);
}

static int read_layer_file(const char *path, unsigned long long *dev, unsigned long long *ino)
{
	char line[64] = "";
	ssize_t n;
	int fd;

	fd = sq_open_regular(AT_FDCWD, path, SQ_OPEN_NOFOLLOW, NULL);
	if (fd < 0)
		return -1;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	line[n] = '\0';
	return sscanf(line, "%llu %llu", dev, ino) == 2 ? 0 : -1;
}

int sq_layer_record(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long dev,
		    unsigned long long ino)
{
	char path[PATH_MAX];

	layer_path(path, sizeof(path), dir, jobid, stepid);
	return write_layer(path, dev, ino);
}

int sq_layer_read(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long *dev,
		  unsigned long long *ino)
{
	char path[PATH_MAX];

	layer_path(path, sizeof(path), dir, jobid, stepid);
	return read_layer_file(path, dev, ino);
}

void sq_layer_forget(const char *dir, uint32_t jobid, uint32_t stepid)
{
	char path[PATH_MAX];

	layer_path(path, sizeof(path), dir, jobid, stepid);
	unlink(path);
}

int sq_layer_record_named(const char *dir, const char *name, unsigned long long dev,
			  unsigned long long ino)
{
	char path[PATH_MAX];

	named_layer_path(path, sizeof(path), dir, name);
	return write_layer(path, dev, ino);
}

int sq_layer_read_named(const char *dir, const char *name, unsigned long long *dev,
			unsigned long long *ino)
{
	char path[PATH_MAX];

	named_layer_path(path, sizeof(path), dir, name);
	return read_layer_file(path, dev, ino);
}

void sq_layer_forget_named(const char *dir, const char *name)
{
	char path[PATH_MAX];

	named_layer_path(path, sizeof(path), dir, name);
	unlink(path);
}

/* The namespaces one sweep holds (sq_mntns_pin): a container's, its layers'. */
#define MAX_PINS 16
#define MAX_LAYERS 64

/* The numbers of the mount namespaces of the job's layer records (kept.h): those of steps
 * whose slurmstepd died (a step that ends removes its own). */
struct layer_ids {
	unsigned long long dev[MAX_LAYERS], ino[MAX_LAYERS];
	int n;
};

/* One layer record, the user's file: read only when it is a regular file. */
static void read_layer(int dirfd_, const char *name, struct layer_ids *l)
{
	char buf[64];

	if (l->n >= MAX_LAYERS ||
	    sq_read_text(sq_open_regular(dirfd_, name, SQ_OPEN_NOFOLLOW, NULL), buf,
			 sizeof(buf)) <= 0)
		return;
	if (sscanf(buf, "%llu %llu", &l->dev[l->n], &l->ino[l->n]) == 2)
		l->n++;
}

/*
 * The layers of l made on the container whose namespaces are pins[0..n), appended, pinned.
 * A layer record is only a number: once the layer's last task is gone its namespace is
 * freed, and the number goes at once to the next namespace made on the node, as likely as
 * not the user's next container. So a number is used only to find a namespace that is
 * still owned by the container's user namespace (squall-layer makes a layer there), which
 * the sweep holds through the container's own namespace; a layer with no task left is
 * nothing to end. Returns the new count.
 */
static int pin_layers(int *pins, int n, const struct layer_ids *l, uid_t uid)
{
	int owners = n;

	for (int i = 0; i < l->n && n < MAX_PINS; i++)
		for (int j = 0; j < owners; j++) {
			int fd = sq_mntns_pin_owned(l->dev[i], l->ino[i], (long)uid, pins[j]);
			if (fd >= 0) {
				pins[n++] = fd;
				break;
			}
		}
	return n;
}

/* The container's namespaces and its layers', held while a member of the keeper's session
 * shows them (sq_session_mntns: verified through pidfds). */
static int pin_container(long sid, uid_t uid, const struct layer_ids *l, int *pins)
{
	int n = sq_session_mntns(sid, (long)uid, pins, 4);

	return pin_layers(pins, n, l, uid);
}

/* End the container of one record, as root: the keeper if it is still the recorded process
 * and uid's, then every process of uid in its session and in the namespaces the sweep
 * holds. 1 when something ran. The record is the user's file: read only when it is a
 * regular file (a FIFO would block the epilog). */
static int sweep_record(int dirfd_, const char *name, uid_t uid, const struct layer_ids *l)
{
	char buf[128], state;
	unsigned long long recorded, start;
	long pid;
	ssize_t n;
	int fd, ran = 0, pidfd, pins[MAX_PINS], npins = 0;

	fd = sq_open_regular(dirfd_, name, SQ_OPEN_NOFOLLOW, NULL);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n <= 0 || sq_running_parse(buf, (size_t)n, &pid, &recorded) < 0)
		return 0;
	pidfd = sq_pidfd_open((pid_t)pid);
	if (pidfd >= 0) {
		if (sq_procstat_read(pid, &state, &start) != 0 || start != recorded ||
		    !sq_proc_owned_by(pid, (long)uid)) {
			/* Another process took the number: the session (if any) is not ours. */
			close(pidfd);
			return 0;
		}
		/* Held before the keeper goes: its runtime then exits and frees the container's
		 * namespaces, whose numbers go at once to the next ones made, the next job's
		 * `enroot start` on this node among them (issue 30). Held, they stay the
		 * container's for the whole sweep. */
		npins = pin_container(pid, uid, l, pins);
		sq_pidfd_signal(pidfd, SIGKILL);
		sq_pidfd_wait_exit(pidfd, 2000);
		ran = 1;
		close(pidfd);
	}
	/* The session id stays allocated while a member lives: what has it is the container's,
	 * and so is what runs in the container's mount namespaces (tasks of a dead step). */
	if (npins == 0)
		npins = pin_container(pid, uid, l, pins);
	for (int round = 0; round < 100; round++) {
		int k = sq_reap_session(pid, (long)uid, -1);
		for (int i = 0; i < npins; i++) {
			int r = sq_reap_mntns(pins[i], (long)uid, -1);
			k += r > 0 ? r : 0;
		}
		if (k <= 0)
			break;
		ran = 1;
		usleep(20000);
	}
	for (int i = 0; i < npins; i++)
		close(pins[i]);
	return ran;
}

int sq_keeper_sweep_job(int dirfd_, uint32_t jobid, uid_t uid)
{
	char prefix[64], layer[64], kept[64];
	struct layer_ids layers = { .n = 0 };
	struct dirent *e;
	int running = 0;
	DIR *d = sq_dir_stream(dirfd_);

	if (d == NULL)
		return 0;
	snprintf(prefix, sizeof(prefix), RECORD_PREFIX "%u.", (unsigned)jobid);
	snprintf(layer, sizeof(layer), "layer-%u.", (unsigned)jobid);
	snprintf(kept, sizeof(kept), "kept-%u-", (unsigned)jobid);
	/* The layers of dead steps, ended with the container they were made on. */
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, layer, strlen(layer)) == 0)
			read_layer(dirfd(d), e->d_name, &layers);
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		if (strstr(e->d_name, ".tmp") == NULL)
			running += sweep_record(dirfd_, e->d_name, uid, &layers);
		unlinkat(dirfd_, e->d_name, 0);
	}
	/* Then the layer records and the sockets and locks of the job's kept containers. */
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if ((strncmp(e->d_name, layer, strlen(layer)) == 0 ||
		     strncmp(e->d_name, kept, strlen(kept)) == 0) &&
		    unlinkat(dirfd(d), e->d_name, 0) < 0 &&
		    unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) < 0) {
			/* gone already (a data directory is empty outside its keeper) */
		}
	}
	closedir(d);
	return running;
}
