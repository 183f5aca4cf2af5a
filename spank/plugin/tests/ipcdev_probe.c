/* ipcdev_probe.c: --container-unshare=ipc's /dev against a container root, outside Slurm
 * (tests/unit/test_plugin_ipcdev.py). As root, with real namespaces:
 *
 * 1. a "container" child makes a user namespace (root mapped to root) and a mount namespace
 *    owned by it, and sets its root up as Enroot does: a rootfs (a tmpfs on ROOTFS, with a
 *    file IMAGE_FILE in its own dev/), the node's /dev bound recursively on it (rslave) with
 *    /dev/shm bound again, the node's /proc, then pivot_root and the old root detached;
 * 2. the probe makes the namespace holder with SQ_NS_IPC, as the step does after the start
 *    (nsholder.c runs ipcdev.c in the container's mount namespace);
 * 3. an "attacker" child joins the container's user and mount namespaces (root there, with
 *    every capability of that user namespace, as under --container-remap-root) and runs
 *    `umount -l` (umount2 MNT_DETACH) on /dev/shm, /dev/pts, /dev/mqueue and /dev until
 *    none succeeds, looking after each for the node's /dev/shm marker and node devices.
 *
 * Output, one "key=value" per line: setup, before (the names in /dev first), before_marker,
 * before_node_dev, umounts, marker, node_dev, left (the names in /dev at the end); the
 * container's mountinfo follows "--- mountinfo before" (before the unmounts) and
 * "--- mountinfo after". Usage: ipcdev_probe ROOTFS MARKER IMAGE_FILE [locked]
 *
 * With "locked" the container keeps the node's root as it is in the copied mount namespace
 * (no rootfs, no pivot_root): its /dev is the node's, locked to its parent, which no
 * process of the container's user namespace can unmount; the holder must then fail
 * (setup=...) rather than leave it beneath the new /dev. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nsholder.h"
#include "pidfd.h"
#include "smallio.h"
#include "unshare.h"

static int in_root(const char *root, const char *sub, char *buf, size_t len)
{
	return snprintf(buf, len, "%s/%s", root, sub) < (int)len ? 0 : -1;
}

/* The rootfs as Enroot leaves it (conf/mounts/10-system.fstab, enroot-switchroot). */
static int enroot_like_root(const char *root, const char *image_file)
{
	char dev[4096], shm[4096], proc[4096], file[4096];
	int fd;

	if (mount("tmpfs", root, "tmpfs", 0, "mode=755") < 0 ||
	    in_root(root, "dev", dev, sizeof(dev)) < 0 || in_root(root, "proc", proc,
								  sizeof(proc)) < 0 ||
	    in_root(root, "dev/shm", shm, sizeof(shm)) < 0 || mkdir(dev, 0755) < 0 ||
	    mkdir(proc, 0555) < 0 || snprintf(file, sizeof(file), "%s/%s", dev, image_file) >=
	    (int)sizeof(file))
		return -1;
	fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	close(fd);
	if (mount("/dev", dev, NULL, MS_BIND | MS_REC, NULL) < 0 ||
	    mount(NULL, dev, NULL, MS_REC | MS_SLAVE, NULL) < 0 ||
	    mount("/dev/shm", shm, NULL, MS_BIND, NULL) < 0 ||
	    mount("/proc", proc, NULL, MS_BIND | MS_REC, NULL) < 0 ||
	    mount(NULL, proc, NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return -1;
	if (chdir(root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    mount(NULL, ".", NULL, MS_REC | MS_SLAVE, NULL) < 0 || umount2(".", MNT_DETACH) < 0 ||
	    chdir("/") < 0)
		return -1;
	return 0;
}

/* The container's first process: ready on `ready`, then holds until `hold` closes. */
static void container(const char *root, const char *image_file, int locked, int ready,
		      int hold)
{
	char c;

	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0 ||
	    sq_write_text("/proc/self/setgroups", "deny") < 0 ||
	    sq_write_text("/proc/self/uid_map", "0 0 1") < 0 ||
	    sq_write_text("/proc/self/gid_map", "0 0 1") < 0) {
		perror("container: user namespace");
		_exit(2);
	}
	if (!locked && enroot_like_root(root, image_file) < 0) {
		perror("container: rootfs");
		_exit(3);
	}
	if (write(ready, "r", 1) != 1)
		_exit(4);
	close(ready);
	while (read(hold, &c, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* A node device: /dev/kmsg or any block device. NULL: none in /dev. */
static const char *node_device(char *buf, size_t len)
{
	DIR *d = opendir("/dev");
	struct dirent *e;
	struct stat st;

	if (stat("/dev/kmsg", &st) == 0)
		return "kmsg";
	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[300];
		snprintf(path, sizeof(path), "/dev/%s", e->d_name);
		if (lstat(path, &st) == 0 && S_ISBLK(st.st_mode)) {
			snprintf(buf, len, "%s", e->d_name);
			closedir(d);
			return buf;
		}
	}
	if (d != NULL)
		closedir(d);
	return NULL;
}

static void names(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int first = 1;

	while (d != NULL && (e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			printf("%s%s", first ? "" : ",", e->d_name);
			first = 0;
		}
	if (d != NULL)
		closedir(d);
	printf("\n");
}

struct seen {
	int marker;
	char dev[256];
};

static void look(const char *marker, struct seen *s)
{
	char path[300], buf[256];
	const char *dev = node_device(buf, sizeof(buf));

	snprintf(path, sizeof(path), "/dev/shm/%s", marker);
	if (access(path, F_OK) == 0)
		s->marker = 1;
	if (dev != NULL && s->dev[0] == '\0')
		snprintf(s->dev, sizeof(s->dev), "%s", dev);
}

/* Every `umount -l` a container root can do on /dev, until none succeeds. */
static int unmount_all(const char *marker, struct seen *s)
{
	static const char *const points[] = { "/dev/shm", "/dev/pts", "/dev/mqueue", "/dev" };
	int total = 0, more = 1;

	while (more && total < 100) {
		more = 0;
		for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++)
			while (umount2(points[i], MNT_DETACH) == 0 && total < 100) {
				total++;
				more = 1;
				look(marker, s);
			}
	}
	return total;
}

static void copy_mountinfo(const char *when)
{
	char buf[4096];
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	printf("--- mountinfo %s\n", when);
	fflush(stdout);
	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		if (write(1, buf, (size_t)n) != n)
			break;
	if (fd >= 0)
		close(fd);
}

static void attacker(pid_t ctr, const char *marker)
{
	char path[64];
	struct seen s = { 0, "" };
	int user, mnt, total;

	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)ctr);
	user = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)ctr);
	mnt = open(path, O_RDONLY | O_CLOEXEC);
	if (user < 0 || mnt < 0 || setns(user, CLONE_NEWUSER) < 0 || setns(mnt, CLONE_NEWNS) < 0 ||
	    chdir("/") < 0) {
		perror("attacker: joining the container");
		_exit(2);
	}
	printf("before=");
	names("/dev");
	look(marker, &s);
	printf("before_marker=%s\nbefore_node_dev=%s\n", s.marker ? "seen" : "absent",
	       s.dev[0] ? s.dev : "absent");
	copy_mountinfo("before");
	s.marker = 0;
	s.dev[0] = '\0';
	total = unmount_all(marker, &s);
	printf("umounts=%d\nmarker=%s\nnode_dev=%s\nleft=", total, s.marker ? "seen" : "absent",
	       s.dev[0] ? s.dev : "absent");
	names("/dev");
	copy_mountinfo("after");
	fflush(stdout);
	_exit(0);
}

static int wait_child(pid_t pid)
{
	int status = 0;

	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int make_holder(pid_t ctr, struct sq_nsholder *h)
{
	char path[64], err[1024];
	struct sq_nsholder_target t;

	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)ctr);
	t.ns_user = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)ctr);
	t.ns_mnt = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/root", (int)ctr);
	t.root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	t.container_pidfd = sq_pidfd_open(ctr);
	if (t.ns_user < 0 || t.ns_mnt < 0 || t.root_fd < 0 || t.container_pidfd < 0) {
		printf("setup=cannot open the container: %s\n", strerror(errno));
		return -1;
	}
	if (sq_nsholder_make(h, SQ_NS_IPC, &t, 0, 0, err, sizeof(err)) < 0) {
		printf("setup=%s\n", err);
		return -1;
	}
	printf("setup=ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct sq_nsholder h;
	int ready[2], hold[2], rc;
	pid_t ctr, att;
	char c;

	if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "locked") != 0) || pipe2(ready, O_CLOEXEC) < 0 || pipe2(hold, O_CLOEXEC) < 0)
		return 2;
	setvbuf(stdout, NULL, _IONBF, 0);
	ctr = fork();
	if (ctr == 0) {
		close(ready[0]);
		close(hold[1]);
		container(argv[1], argv[3], argc == 5, ready[1], hold[0]);
	}
	close(ready[1]);
	close(hold[0]);
	if (ctr < 0 || read(ready[0], &c, 1) != 1) {
		printf("setup=the container did not start\n");
		return 3;
	}
	rc = make_holder(ctr, &h);
	if (rc == 0) {
		att = fork();
		if (att == 0)
			attacker(ctr, argv[2]);
		rc = att < 0 ? -1 : wait_child(att);
		sq_nsholder_release(&h);
	}
	close(hold[1]);
	wait_child(ctr);
	return rc == 0 ? 0 : 4;
}
