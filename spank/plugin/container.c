/* container.c: see container.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "container.h"
#include "pidfd.h"
#include "procstat.h"
#include "smallio.h"
#include "strbuf.h"

void sq_container_init(struct sq_container *c)
{
	memset(c, 0, sizeof(*c));
	c->pid = -1;
	c->pidfd = c->ns_user = c->ns_mnt = c->ns_cgroup = c->root_fd = c->cwd_fd = -1;
	c->child.pid = -1;
	c->child.out_fd = c->child.err_fd = -1;
	sq_keeper_init(&c->keeper);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Open /proc/PID/ns/NAME; -1 (and no error) when it is our own namespace already,
 * e.g. a runtime that does not unshare the cgroup namespace. */
static int open_ns(pid_t pid, const char *name, int *out, char *err, size_t errlen)
{
	char path[64], self[64];
	struct stat a, b;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, name);
	snprintf(self, sizeof(self), "/proc/self/ns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		sq_errf(err, errlen, "cannot open the container's %s namespace (%s): %s",
			name, path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &a) == 0 && stat(self, &b) == 0 && a.st_ino == b.st_ino &&
	    a.st_dev == b.st_dev) {
		close(fd);
		fd = -1;
	}
	*out = fd;
	return 0;
}

static int read_environ(struct sq_container *c, char *err, size_t errlen)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)c->pid);
	c->environ = sq_read_file(path, &c->environ_len);
	if (c->environ == NULL)
		return sq_errf(err, errlen, "cannot read the container's environment (%s): %s",
			       path, strerror(errno));
	return 0;
}

static int hold(struct sq_container *c, char *err, size_t errlen)
{
	char path[64];

	if (c->pidfd < 0)
		c->pidfd = sq_pidfd_open(c->pid);
	if (c->pidfd < 0) {
		sq_errf(err, errlen, "cannot hold the container process %d (pidfd_open: %s); "
			"a Linux kernel 5.3 or newer is needed", (int)c->pid, strerror(errno));
		return -1;
	}
	if (c->starttime == 0) {
		char state;
		if (sq_procstat_read(c->pid, &state, &c->starttime) < 0) {
			sq_errf(err, errlen, "the container process %d is gone", (int)c->pid);
			return -1;
		}
	}
	if (open_ns(c->pid, "user", &c->ns_user, err, errlen) < 0 ||
	    open_ns(c->pid, "mnt", &c->ns_mnt, err, errlen) < 0 ||
	    open_ns(c->pid, "cgroup", &c->ns_cgroup, err, errlen) < 0)
		return -1;
	if (c->ns_mnt < 0) {
		sq_errf(err, errlen, "the runtime started the container in the node's own mount "
			"namespace: check that the enroot= path in plugstack.conf is Enroot");
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/%d/root", (int)c->pid);
	c->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/cwd", (int)c->pid);
	c->cwd_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (c->root_fd < 0 || c->cwd_fd < 0) {
		sq_errf(err, errlen, "cannot open the container's root or working directory: %s",
			strerror(errno));
		return -1;
	}
	return read_environ(c, err, errlen);
}

int sq_container_attach_kept(struct sq_container *c, int sock, uid_t uid, char *err,
			     size_t errlen)
{
	struct sq_keeper k;
	pid_t pid;
	int pidfd;

	sq_keeper_init(&k);
	if (sq_keeper_ask_attach(sock, &k, &pid, &pidfd, err, errlen) < 0) {
		close(sock);
		return -1;
	}
	c->keeper = k;
	c->kept = 1;
	c->uid = uid;
	c->pid = pid;
	c->pidfd = pidfd;
	c->starttime = 0;
	c->owned = 0;
	return hold(c, err, errlen);
}

int sq_container_start_kept(struct sq_container *c, const struct sq_start_request *r,
			    char *err, size_t errlen)
{
	if (sq_container_start(c, r, err, errlen) < 0)
		return -1;
	c->owned = 0;
	c->kept = 1;
	return 0;
}

/* The device and inode of the mount namespace c holds (a step's layer): its name for the
 * keeper and the epilog. */
static int layer_id(const struct sq_container *c, unsigned long long *dev,
		    unsigned long long *ino)
{
	struct stat st;

	if (c->ns_mnt < 0 || fstat(c->ns_mnt, &st) < 0)
		return -1;
	*dev = (unsigned long long)st.st_dev;
	*ino = (unsigned long long)st.st_ino;
	return 0;
}

/* The container's working directory (its first process's, a path in the container) under
 * root, a layer's: the process a layer is found through may be a task that changed
 * directory. -1 when it cannot be found there. */
static int open_first_cwd(const struct sq_container *c, int root)
{
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	char link[64], path[4096];
	ssize_t n;

	if (c->pid <= 0 || root < 0)
		return -1;
	snprintf(link, sizeof(link), "/proc/%d/cwd", (int)c->pid);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0 || path[0] != '/')
		return -1;
	path[n] = '\0';
	return (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
}

int sq_container_use_layer(struct sq_container *c, pid_t pid, char *err, size_t errlen)
{
	char path[64];
	int mnt, root, cwd;

	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
	mnt = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
	root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cwd = open_first_cwd(c, root);
	if (cwd < 0) {
		snprintf(path, sizeof(path), "/proc/%d/cwd", (int)pid);
		cwd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	if (mnt < 0 || root < 0 || cwd < 0) {
		sq_errf(err, errlen, "cannot hold the step's layer (process %d): %s", (int)pid,
			strerror(errno));
		if (mnt >= 0)
			close(mnt);
		if (root >= 0)
			close(root);
		if (cwd >= 0)
			close(cwd);
		return -1;
	}
	close_fd(&c->ns_mnt);
	close_fd(&c->root_fd);
	close_fd(&c->cwd_fd);
	c->ns_mnt = mnt;
	c->root_fd = root;
	c->cwd_fd = cwd;
	if (layer_id(c, &c->layer_dev, &c->layer_ino) == 0) {
		c->layer = 1;
		sq_keeper_tell_layer(&c->keeper, c->ns_mnt, c->layer_dev, c->layer_ino);
	}
	return 0;
}

int sq_container_start(struct sq_container *c, const struct sq_start_request *r,
		       char *err, size_t errlen)
{
	const char *argv[16];
	int n = 0;

	argv[n++] = r->enroot;
	argv[n++] = "start";
	if (r->writable == 1)
		argv[n++] = "--rw";
	if (r->remap_root == 1)
		argv[n++] = "--root";
	if (r->conf_path != NULL) {
		argv[n++] = "--conf";
		argv[n++] = r->conf_path;
	}
	if (r->rc_path != NULL) {
		argv[n++] = "--rc";
		argv[n++] = r->rc_path;
	}
	argv[n++] = r->target;
	/* The container's first process stops itself once the runtime has set up
	 * everything; the tasks then join its namespaces. */
	argv[n++] = "sh";
	argv[n++] = "-c";
	argv[n++] = "kill -STOP $$; exit 0";
	argv[n] = NULL;

	c->uid = r->cred->uid;
	if (sq_keeper_start(&c->keeper, r->keeper, r->keeper_args, (char *const *)argv, r->envp,
			    r->cred, &c->child, r->timeout_s, &c->pid, &c->pidfd, err, errlen) < 0)
		return -1;
	c->owned = 1;
	if (hold(c, err, errlen) < 0)
		return -1;
	return 0;
}

int sq_container_attach(struct sq_container *c, pid_t pid, unsigned long long starttime,
			char *err, size_t errlen)
{
	unsigned long long now = 0;
	char state;

	c->owned = 0;
	c->pid = pid;
	c->starttime = starttime;
	/* The pidfd first, then the start time: if they match, the pidfd is that process
	 * (a reused PID has a later start time), and it cannot be swapped afterwards. */
	c->pidfd = sq_pidfd_open(pid);
	if (c->pidfd < 0 || sq_procstat_read(pid, &state, &now) < 0 || now != starttime ||
	    state == 'Z' || state == 'X') {
		sq_container_stop(c);
		return 1;
	}
	if (hold(c, err, errlen) < 0) {
		sq_container_stop(c);
		return -1;
	}
	/* Everything is opened by path under /proc/PID: still the same process? */
	if (!sq_container_alive(c)) {
		sq_container_stop(c);
		return 1;
	}
	return 0;
}

int sq_container_join(const struct sq_container *c, const char *workdir, char *err, size_t errlen)
{
	if (c->ns_user >= 0 && setns(c->ns_user, CLONE_NEWUSER) < 0)
		return sq_errf(err, errlen, "cannot join the container's user namespace: %s",
				strerror(errno));
	if (setns(c->ns_mnt, CLONE_NEWNS) < 0)
		return sq_errf(err, errlen, "cannot join the container's mount namespace: %s",
				strerror(errno));
	if (c->ns_cgroup >= 0 && setns(c->ns_cgroup, CLONE_NEWCGROUP) < 0)
		return sq_errf(err, errlen, "cannot join the container's cgroup namespace: %s",
				strerror(errno));
	/* The namespace's root is the runtime's new root after pivot_root; chroot to the
	 * held root as well, so a runtime that used chroot is joined the same way. */
	if (fchdir(c->root_fd) < 0 || chroot(".") < 0)
		return sq_errf(err, errlen, "cannot enter the container's root filesystem: %s",
				strerror(errno));
	if (workdir != NULL) {
		/* A relative --container-workdir starts from the container's own working
		 * directory (the image's WORKDIR), as with Pyxis. */
		if (workdir[0] != '/' && fchdir(c->cwd_fd) < 0 && chdir("/") < 0)
			return sq_errf(err, errlen, "cannot change to the container's working "
					"directory: %s", strerror(errno));
		/* "PATH: strerror" as Pyxis says it, which scripts grep. */
		if (chdir(workdir) < 0)
			return sq_errf(err, errlen, "--container-workdir: cannot change to it inside "
					"the container: %s: %s", workdir, strerror(errno));
	} else if (fchdir(c->cwd_fd) < 0 && chdir("/") < 0) {
		return sq_errf(err, errlen, "cannot change to the container's working "
				"directory: %s", strerror(errno));
	}
	return 0;
}

int sq_container_alive(const struct sq_container *c)
{
	return c->pidfd >= 0 && sq_pidfd_signal(c->pidfd, 0) == 0;
}

void sq_container_stop(struct sq_container *c)
{
	/* Attached (or never started): another step owns the process. Owned: its keeper
	 * ends it (keeper_client.h). */
	if (c->kept)
		sq_keeper_leave(&c->keeper);   /* the job's container lives on (kept.h) */
	else if (c->owned)
		sq_keeper_stop(&c->keeper, c->uid);
	close_fd(&c->pidfd);
	close_fd(&c->ns_user);
	close_fd(&c->ns_mnt);
	close_fd(&c->ns_cgroup);
	close_fd(&c->root_fd);
	close_fd(&c->cwd_fd);
	free(c->environ);
	sq_child_close(&c->child);
	sq_container_init(c);
}
