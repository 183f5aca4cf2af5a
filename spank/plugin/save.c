/* save.c: see save.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "safeopen.h"
#include "save.h"
#include "strbuf.h"

#define SAVED_NAME "image.sqsh"   /* the runtime's output, inside the private directory */

/* path's directory and last component, into dir and base. 0 ok, -1 with err. */
static int split(const char *path, char *dir, char *base, size_t len, char *err,
		 size_t errlen)
{
	char a[PATH_MAX], b[PATH_MAX];

	if (snprintf(a, sizeof(a), "%s", path) >= (int)sizeof(a))
		return sq_errf(err, errlen, "%s: path too long", path);
	snprintf(b, sizeof(b), "%s", path);
	snprintf(dir, len, "%s", dirname(a));
	snprintf(base, len, "%s", basename(b));
	if (strcmp(base, "/") == 0 || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return sq_errf(err, errlen, "%s: not a file name: give a file path (e.g. "
			       "%s/saved.sqsh)", path, path);
	return 0;
}

/* The target's directory, opened and checked: a directory the caller may write, where
 * other users cannot replace what is put in it (not world-writable unless sticky). */
static int open_parent(const char *dir, char *err, size_t errlen)
{
	struct stat st;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0)
		return sq_errf(err, errlen, "directory %s does not exist on this node: create it "
			       "first (the image is written there at the step's end)", dir);
	if (fstat(dfd, &st) < 0 || faccessat(dfd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
		close(dfd);
		return sq_errf(err, errlen, "directory %s is not writable by the job user: pick "
			       "a directory you can write", dir);
	}
	if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		close(dfd);
		return sq_errf(err, errlen, "directory %s is writable by every user and not "
			       "sticky (mode %04o): anyone could replace the saved image; save into "
			       "a directory of yours (or chmod +t %s)", dir,
			       (unsigned)(st.st_mode & 07777), dir);
	}
	return dfd;
}

/* An existing target is replaced only when it is a regular file of uid's. */
static int check_target(int dfd, const char *base, const char *path, uid_t uid, char *err,
			size_t errlen)
{
	struct stat st;

	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : sq_errf(err, errlen, "cannot check %s: %s", path,
						     strerror(errno));
	if (S_ISDIR(st.st_mode))
		return sq_errf(err, errlen, "%s is a directory: give a file path (e.g. "
			       "%s/saved.sqsh)", path, path);
	if (!S_ISREG(st.st_mode))
		return sq_errf(err, errlen, "%s exists and is %s, not a regular file: remove it "
			       "or give another path (only a file of yours is replaced)", path,
			       sq_file_kind((unsigned int)st.st_mode));
	if (st.st_uid != uid)
		return sq_errf(err, errlen, "%s exists and belongs to uid %u, not to you: remove "
			       "it or give another path (only a file of yours is replaced)", path,
			       (unsigned)st.st_uid);
	return 0;
}

int sq_save_check(const char *path, char *err, size_t errlen)
{
	char dir[PATH_MAX], base[PATH_MAX], why[PATH_MAX * 2 + 256];
	int dfd;

	if (split(path, dir, base, sizeof(dir), why, sizeof(why)) < 0 ||
	    (dfd = open_parent(dir, why, sizeof(why))) < 0)
		return sq_errf(err, errlen, "--container-save=%s: %s", path, why);
	if (check_target(dfd, base, path, geteuid(), why, sizeof(why)) < 0) {
		close(dfd);
		return sq_errf(err, errlen, "--container-save=%s: %s", path, why);
	}
	close(dfd);
	return 0;
}

/* A fresh private directory in dfd with an unguessable name: its descriptor, or -1. */
static int make_private(int dfd, uint32_t jobid, uint32_t stepid, char *name, size_t len,
			char *err, size_t errlen)
{
	unsigned char r[16];
	char hex[33];
	int pfd;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return sq_errf(err, errlen, "cannot get random bytes: %s", strerror(errno));
	for (size_t i = 0; i < sizeof(r); i++)
		snprintf(hex + 2 * i, 3, "%02x", r[i]);
	snprintf(name, len, ".squall-save-%u.%u-%s", (unsigned)jobid, (unsigned)stepid, hex);
	if (mkdirat(dfd, name, 0700) < 0)
		return sq_errf(err, errlen, "cannot make a temporary directory beside the "
			       "target: %s", strerror(errno));
	pfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0 || fchmod(pfd, 0700) < 0) {
		sq_errf(err, errlen, "cannot open the temporary directory %s: %s", name,
			strerror(errno));
		if (pfd >= 0)
			close(pfd);
		unlinkat(dfd, name, AT_REMOVEDIR);
		return -1;
	}
	return pfd;
}

/* Empty and remove the private directory (only the runtime's files are in it). */
static void remove_private(int dfd, int pfd, const char *name)
{
	DIR *d = sq_dir_stream(pfd);
	struct dirent *e;

	while (d != NULL && (e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
		    unlinkat(pfd, e->d_name, 0) < 0)
			unlinkat(pfd, e->d_name, AT_REMOVEDIR);
	if (d != NULL)
		closedir(d);
	close(pfd);
	unlinkat(dfd, name, AT_REMOVEDIR);
}

/* `enroot export -o /proc/self/fd/3/image.sqsh CONTAINER`, fd 3 the private directory. */
static int run_export(const struct sq_runtime *rt, const struct sq_cred *self,
		      const char *container, int pfd, char *err, size_t errlen)
{
	const char *argv[] = { rt->enroot, "export", "-o", "/proc/self/fd/3/" SAVED_NAME,
			       container, NULL };
	const struct sq_spawn_opts o = { NULL, -1, &pfd, 1, NULL, NULL, NULL };
	struct sq_child child;
	int status, ok;

	if (sq_run_opts(rt->enroot, (char *const *)argv, rt->envp, self, &o, &status, &child,
			err, errlen) < 0)
		return -1;
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	if (!ok) {
		char why[64];
		sq_status_text(status, why, sizeof(why));
		sq_child_failure(&child, "enroot export", why, err, errlen);
	}
	sq_child_close(&child);
	return ok ? 0 : -1;
}

/* The saved file into place, relative to the checked directory. */
static int publish(int dfd, int pfd, const char *base, const char *path, uid_t uid,
		   char *err, size_t errlen)
{
	struct stat st;

	if (fstatat(pfd, SAVED_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return sq_errf(err, errlen, "enroot export wrote no image file for %s", path);
	if (check_target(dfd, base, path, uid, err, errlen) < 0)
		return -1;
	if (renameat(pfd, SAVED_NAME, dfd, base) < 0)
		return sq_errf(err, errlen, "cannot move the saved image into place at %s: %s",
			       path, strerror(errno));
	return 0;
}

static int write_map(const char *file, const char *text)
{
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	ssize_t n = -1;

	if (fd >= 0) {
		n = write(fd, text, strlen(text));
		close(fd);
	}
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/*
 * Enroot makes the mount points a container's start needs and the image lacks (var/run,
 * var/lock on busybox or a small image, a --container-mounts target) mode 000, its mark
 * for what `enroot export` leaves out; but an export as the plain user cannot look into
 * them (`find: ... Permission denied`) and fails. So the export runs in a user namespace
 * of its own that maps the user to itself alone, with CAP_DAC_READ_SEARCH raised as an
 * ambient capability for the runtime and mksquashfs it starts: they read the container's
 * tree whatever its modes, as Enroot's own create and start handle it, and only files of
 * the user's ids (the kernel grants the capability over mapped owners alone). Best effort:
 * where user namespaces are off, the export runs as before.
 */
static void read_own_tree(uid_t uid, gid_t gid)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	const unsigned int cap = CAP_DAC_READ_SEARCH;
	char map[64];

	/* A process that changed its ids is not dumpable: its /proc/self maps stay root's. */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 || unshare(CLONE_NEWUSER) < 0)
		return;
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	if (write_map("/proc/self/uid_map", map) < 0)
		return;
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	if (write_map("/proc/self/setgroups", "deny") < 0 ||
	    write_map("/proc/self/gid_map", map) < 0)
		return;
	if (syscall(SYS_capget, &hdr, data) < 0)
		return;
	data[cap / 32].inheritable |= 1U << (cap % 32);
	if (syscall(SYS_capset, &hdr, data) == 0)
		(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
}

/* In the child, as the user: the whole save. 0 ok, -1 with err. */
static int export_as_user(const struct sq_runtime *rt, const char *container,
			  const char *path, uint32_t jobid, uint32_t stepid, char *err,
			  size_t errlen)
{
	const struct sq_cred self = { getuid(), getgid(), NULL, 0 };
	char dir[PATH_MAX], base[PATH_MAX], name[96];
	int dfd, pfd, rc;

	if (split(path, dir, base, sizeof(dir), err, errlen) < 0 ||
	    (dfd = open_parent(dir, err, errlen)) < 0)
		return -1;
	if (check_target(dfd, base, path, self.uid, err, errlen) < 0 ||
	    (pfd = make_private(dfd, jobid, stepid, name, sizeof(name), err, errlen)) < 0) {
		close(dfd);
		return -1;
	}
	read_own_tree(self.uid, self.gid);
	rc = run_export(rt, &self, container, pfd, err, errlen);
	if (rc == 0)
		rc = publish(dfd, pfd, base, path, self.uid, err, errlen);
	remove_private(dfd, pfd, name);
	close(dfd);
	return rc;
}

static int become(const struct sq_cred *cred)
{
	if (cred->groups && setgroups((size_t)cred->ngroups, cred->groups) < 0)
		return -1;
	if (setresgid(cred->gid, cred->gid, cred->gid) < 0 ||
	    setresuid(cred->uid, cred->uid, cred->uid) < 0)
		return -1;
	return getuid() == cred->uid && geteuid() == cred->uid ? 0 : -1;
}

static int reap(pid_t pid, int *status)
{
	pid_t r;

	do {
		r = waitpid(pid, status, 0);
	} while (r < 0 && errno == EINTR);
	return r == pid ? 0 : -1;
}

int sq_save_export(const struct sq_runtime *rt, const char *container, const char *path,
		   uint32_t jobid, uint32_t stepid, char *err, size_t errlen)
{
	/* The child's error line comes back through memory shared with it. */
	char *shared = mmap(NULL, errlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			    -1, 0);
	int status = 0;
	pid_t pid;

	if (shared == MAP_FAILED)
		return sq_errf(err, errlen, "cannot save: %s", strerror(errno));
	shared[0] = '\0';
	pid = fork();
	if (pid == 0) {
		if (rt->cred != NULL && become(rt->cred) < 0)
			_exit(126);
		_exit(export_as_user(rt, container, path, jobid, stepid, shared, errlen) == 0
		      ? 0 : 1);
	}
	if (pid > 0 && reap(pid, &status) == 0 && WIFEXITED(status) &&
	    WEXITSTATUS(status) == 0) {
		munmap(shared, errlen);
		return 0;
	}
	snprintf(err, errlen, "%s", shared[0] ? shared : "cannot save as the job user");
	munmap(shared, errlen);
	return -1;
}
