/* kept.c: see kept.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kept.h"
#include "lifecycle.h"
#include "mountinfo.h"
#include "pidfd.h"
#include "procstat.h"

#define ATTACH_WAIT_S 300     /* a kept container being started by another step */
#define LAYER_WAIT_MS 30000

/* Read a whole small file (mountinfo) into a heap string; NULL on error. */
static char *slurp(const char *path)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (buf == NULL || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	for (;;) {
		ssize_t n;
		if (len + 1 >= cap) {
			char *bigger = realloc(buf, cap * 2);
			if (bigger == NULL)
				break;
			buf = bigger;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return buf;
}

static void kept_path(char *buf, size_t len, const char *dir, uint32_t jobid, const char *key,
		      const char *suffix)
{
	snprintf(buf, len, "%s/kept-%u-%s.%s", dir, (unsigned)jobid, key, suffix);
}

/* A connected socket to the keeper of (jobid, key); -1 (errno) when none answers. */
static int dial(const char *dir, uint32_t jobid, const char *key)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd;

	kept_path(addr.sun_path, sizeof(addr.sun_path), dir, jobid, key, "sock");
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int sq_kept_key(const struct sq_start_request *r, const char *identity, char key[33])
{
	char flags[64], *conf = r->conf_path ? slurp(r->conf_path) : NULL;
	char *rc = r->rc_path ? slurp(r->rc_path) : NULL;
	const char *parts[] = { r->enroot, r->target, identity ? identity : "", flags,
				conf ? conf : "", rc ? rc : "-", NULL };
	int ok;

	snprintf(flags, sizeof(flags), "rw=%d root=%d", r->writable, r->remap_root);
	ok = (!r->conf_path || conf) && (!r->rc_path || rc) &&
	     sq_life_key(parts, r->envp, key) == 0;
	free(conf);
	free(rc);
	return ok ? 0 : -1;
}

int sq_kept_state(const char *runtime_dir, uint32_t jobid, const char *key)
{
	char path[PATH_MAX];
	struct stat st;
	int fd = dial(runtime_dir, jobid, key);

	if (fd >= 0) {
		close(fd);
		return SQ_KEPT_LIVE;
	}
	kept_path(path, sizeof(path), runtime_dir, jobid, key, "sock");
	return lstat(path, &st) == 0 ? SQ_KEPT_STALE : SQ_KEPT_NONE;
}

/* "attached KPID PID" with pidfds of both, within wait_s. 0 ok, -1 with err. */
static int ask_attach(int sock, struct sq_keeper *k, pid_t *pid, int *pidfd, char *err,
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
		snprintf(err, errlen, "the job's kept container did not answer: %s",
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
		snprintf(err, errlen, "the job's kept container ended while this step joined it");
		return -1;
	}
	k->pid = kpid;
	k->pidfd = fds[0];
	k->sock = sock;
	*pid = rpid;
	*pidfd = fds[1];
	return 0;
}

int sq_kept_attach(struct sq_container *c, const struct sq_kept_request *r, int *started,
		   char *err, size_t errlen)
{
	char lock[PATH_MAX], sock[PATH_MAX], idle[16];
	const char *args[16] = { "--job", sock, idle, NULL };
	struct sq_start_request start = *r->start;
	int lockfd, fd, rc = -1;
	pid_t pid;
	int pidfd;

	*started = 0;
	kept_path(lock, sizeof(lock), r->runtime_dir, r->jobid, r->key, "lock");
	kept_path(sock, sizeof(sock), r->runtime_dir, r->jobid, r->key, "sock");
	if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		snprintf(err, errlen, "runtime directory %s is too long for the kept container's "
			 "socket (at most about 60 characters: plugstack.conf runtime_path)",
			 r->runtime_dir);
		return -1;
	}
	lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX) < 0) {
		snprintf(err, errlen, "cannot lock %s: %s", lock, strerror(errno));
		if (lockfd >= 0)
			close(lockfd);
		return -1;
	}
	fd = dial(r->runtime_dir, r->jobid, r->key);
	if (fd >= 0) {
		sq_keeper_init(&c->keeper);
		if (ask_attach(fd, &c->keeper, &pid, &pidfd, err, errlen) < 0) {
			close(fd);
			goto out;
		}
		c->kept = 1;
		c->uid = r->start->cred->uid;
		if (sq_container_hold(c, pid, pidfd, err, errlen) < 0)
			goto out;
		rc = 0;
		goto out;
	}
	/* None answers: start it, kept for the job. */
	snprintf(idle, sizeof(idle), "%d", r->idle_s);
	for (int i = 0, n = 3; r->extra_args != NULL && r->extra_args[i] != NULL && n < 15; i++)
		args[n++] = r->extra_args[i];
	start.keeper_args = args;
	if (sq_container_start(c, &start, err, errlen) < 0)
		goto out;
	c->owned = 0;
	c->kept = 1;
	*started = 1;
	rc = 0;
out:
	flock(lockfd, LOCK_UN);
	close(lockfd);
	return rc;
}

int sq_kept_layer(struct sq_container *c, const char *layer_path, const struct sq_cred *cred,
		  char *err, size_t errlen)
{
	char pidtext[24], path[64], devs[2048], *mine, *theirs, line[32] = "";
	const char *argv[8 + 2 * 64];
	int ready[2] = { -1, -1 }, release[2] = { -1, -1 }, pass[4], n = 0, rc = -1;
	struct sq_child child = { -1, -1, -1 };
	unsigned long long dev, ino;
	struct pollfd p;
	ssize_t got;
	pid_t layer = -1;

	/* Which tmpfs mounts are the container's own, to be made fresh for the step. */
	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)c->pid);
	theirs = slurp(path);
	mine = slurp("/proc/self/mountinfo");
	devs[0] = '\0';
	if (theirs != NULL)
		sq_mountinfo_fresh_tmpfs(theirs, mine, devs, sizeof(devs));
	free(theirs);
	free(mine);

	snprintf(pidtext, sizeof(pidtext), "%d", (int)c->pid);
	argv[n++] = layer_path;
	argv[n++] = "--pid";
	argv[n++] = pidtext;
	for (char *save = NULL, *d = strtok_r(devs, " ", &save); d != NULL && n < 6 + 2 * 64;
	     d = strtok_r(NULL, " ", &save)) {
		argv[n++] = "--renew";
		argv[n++] = d;
	}
	argv[n] = NULL;
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(release, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot make the step's layer: %s", strerror(errno));
		goto out;
	}
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)c->pid);
	pass[0] = c->ns_user >= 0 ? c->ns_user : open(path, O_RDONLY | O_CLOEXEC);
	pass[1] = c->ns_mnt;
	pass[2] = ready[1];
	pass[3] = release[0];
	if (sq_spawn_detached(layer_path, (char *const *)argv, NULL, cred, pass, 4, &child, err,
			      errlen) < 0) {
		if (c->ns_user < 0 && pass[0] >= 0)
			close(pass[0]);
		goto out;
	}
	if (c->ns_user < 0 && pass[0] >= 0)
		close(pass[0]);
	close(ready[1]);
	ready[1] = -1;
	close(release[0]);
	release[0] = -1;
	p = (struct pollfd){ ready[0], POLLIN, 0 };
	got = poll(&p, 1, LAYER_WAIT_MS) > 0 ? read(ready[0], line, sizeof(line) - 1) : -1;
	if (got > 0)
		line[got] = '\0';
	/* "ready PID": it holds the layer until the release pipe closes, so PID is it. */
	if (got <= 0 || sscanf(line, "ready %d", &layer) != 1 || layer <= 0) {
		sq_child_failure(&child, "the step's layer", got == 0 ? "it exited" : "no answer",
				 err, errlen);
		goto out;
	}
	if (sq_container_use_layer(c, layer, err, errlen) < 0)
		goto out;
	if (sq_kept_layer_id(c, &dev, &ino) == 0 && c->keeper.sock >= 0) {
		char msg[96];
		snprintf(msg, sizeof(msg), KEEPER_MSG_LAYER " %llu %llu", dev, ino);
		if (send(c->keeper.sock, msg, strlen(msg), MSG_NOSIGNAL) < 0) {
			/* the keeper ends it with the job anyway */
		}
	}
	rc = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (release[i] >= 0)
			close(release[i]);
	}
	sq_child_close(&child);
	return rc;
}

int sq_kept_layer_id(const struct sq_container *c, unsigned long long *dev,
		     unsigned long long *ino)
{
	struct stat st;

	if (c->ns_mnt < 0 || fstat(c->ns_mnt, &st) < 0)
		return -1;
	*dev = (unsigned long long)st.st_dev;
	*ino = (unsigned long long)st.st_ino;
	return 0;
}
