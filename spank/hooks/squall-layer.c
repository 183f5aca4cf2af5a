/*
 * squall-layer: a fresh layer for one step on the job's kept container (lifecycle.h).
 *
 *   squall-layer --pid PID [--renew MAJ:MIN]...
 *   squall-layer --pid PID --share
 *
 * Run by the plugin as the job user, with fd 3 the container's user namespace, fd 4 its
 * mount namespace, fd 5 the write end of a pipe ("ready PID\n" once the layer is built) and
 * fd 6 the read end of another (the plugin closes it once it holds the layer, whose
 * mount namespace, root and working directory it finds through /proc/PID). It joins
 * the container's namespaces, makes a mount namespace of its own from a copy of the
 * container's, and there builds the step's root:
 *   - an overlay whose lower layer is the container's root (the image and what the
 *     runtime set up) and whose upper layer is a new, empty tmpfs directory, so the
 *     step's writes go there and vanish with it (read-only when the container's root is);
 *   - every tmpfs the runtime mounted in the container (--renew: their devices, the ones
 *     not seen on the host) mounted again, empty, with the same options;
 *   - every other mount (/proc, /sys, /dev, binds of host directories) bound again.
 * then pivots into it and changes to the directory the container's first process (PID)
 * is in. The plugin's tasks join that mount namespace instead of the container's: their
 * writes never reach the kept container, nor another step's layer.
 * With --share (a container started for a step, named or not) the new mount namespace is
 * a plain copy of the container's, with nothing renewed and no propagation changed: the
 * tasks write to the container as before, and, being the only processes in it, they are
 * what `enroot list -f` shows for the container, as with Pyxis (sentinel.h hides the
 * container's own stopped first process).
 * Exit 0 after the plugin let go; 1 with one line on stderr when the layer cannot be made
 * (the plugin then starts a container for the step).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Relative: this helper is also built alone, without the plugin's include path. */
#include "../core/protocol.h"

#define PROG "squall-layer"
#define MAX_RENEW 64

struct mnt {
	char dev[32];
	char point[PATH_MAX];
	char fstype[64];
	char flags[256];     /* per-mount options: ro, nosuid, ... */
	char super[512];     /* superblock options: size=, mode=, ... */
	unsigned long propagation; /* MS_UNBINDABLE or MS_SHARED to give back, or 0 */
};

static void die(const char *what, const char *arg)
{
	fprintf(stderr, "squall: " PROG ": %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "",
		strerror(errno));
	exit(1);
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *w = s;

	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* The propagation a mount had (mountinfo's optional fields, between the seventh field and
 * " - "): the step's namespace starts all private, so these are given back at the end. A
 * slave ("master:N") stays private: its master is outside the step's reach. */
static unsigned long propagation_of(const char *line, const char *sep)
{
	const char *p = line;
	int shared = 0;

	for (int field = 0; field < 6 && p != NULL && p < sep; field++) {
		p = strchr(p, ' ');
		p = p ? p + 1 : NULL;
	}
	for (; p != NULL && p < sep; p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL) {
		if (strncmp(p, "unbindable", 10) == 0 && (p[10] == ' ' || p[10] == '\n'))
			return MS_UNBINDABLE;
		shared |= strncmp(p, "shared:", 7) == 0;
	}
	return shared ? MS_SHARED : 0;
}

/* Every mount of this namespace, in mountinfo order (a parent before its children). */
static struct mnt *read_mounts(size_t *count)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	struct mnt *list = NULL;
	size_t n = 0, cap = 0;
	char line[4096];

	if (f == NULL)
		die("cannot read", "/proc/self/mountinfo");
	while (fgets(line, sizeof(line), f) != NULL) {
		char dev[32], root[PATH_MAX], point[PATH_MAX], flags[256], *sep, *rest;
		char fstype[64], source[PATH_MAX], super[512];

		if (sscanf(line, "%*s %*s %31s %4095s %4095s %255s", dev, root, point, flags) != 4)
			continue;
		sep = strstr(line, " - ");
		if (sep == NULL)
			continue;
		rest = sep + 3;
		super[0] = '\0';
		if (sscanf(rest, "%63s %4095s %511s", fstype, source, super) < 2)
			continue;
		if (n == cap) {
			struct mnt *grown = realloc(list, (cap = cap ? cap * 2 : 32) * sizeof(*list));
			if (grown == NULL)
				die("out of memory", NULL);
			list = grown;
		}
		snprintf(list[n].dev, sizeof(list[n].dev), "%s", dev);
		unescape(point);
		snprintf(list[n].point, sizeof(list[n].point), "%s", point);
		snprintf(list[n].fstype, sizeof(list[n].fstype), "%s", fstype);
		snprintf(list[n].flags, sizeof(list[n].flags), "%s", flags);
		snprintf(list[n].super, sizeof(list[n].super), "%s", super);
		list[n].propagation = propagation_of(line, sep);
		n++;
	}
	fclose(f);
	*count = n;
	return list;
}

static int has_option(const char *csv, const char *opt)
{
	size_t len = strlen(opt);

	for (const char *p = csv; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, opt, len) == 0 && (p[len] == ',' || p[len] == '\0'))
			return 1;
	return 0;
}

static unsigned long mount_flags(const char *csv)
{
	unsigned long f = 0;

	if (has_option(csv, "ro"))
		f |= MS_RDONLY;
	if (has_option(csv, "nosuid"))
		f |= MS_NOSUID;
	if (has_option(csv, "nodev"))
		f |= MS_NODEV;
	if (has_option(csv, "noexec"))
		f |= MS_NOEXEC;
	if (has_option(csv, "noatime"))
		f |= MS_NOATIME;
	if (has_option(csv, "nodiratime"))
		f |= MS_NODIRATIME;
	return f;
}

/* The tmpfs superblock options as the kernel shows them (size=, mode=, huge=, ...), less
 * rw/ro, which are flags, not data: the fresh tmpfs is made like the runtime's. Less
 * uid= and gid= too: the kernel shows them as the node's ids, which a remapped user
 * namespace (--container-remap-root) does not map, so mounting with them fails; made
 * without them the tmpfs belongs to the caller, the container's user as the runtime's
 * was. */
static void tmpfs_data(const char *super, char *out, size_t len)
{
	size_t o = 0;
	char copy[512], *save = NULL;

	out[0] = '\0';
	snprintf(copy, sizeof(copy), "%s", super);
	for (char *opt = strtok_r(copy, ",", &save); opt; opt = strtok_r(NULL, ",", &save))
		if (strcmp(opt, "rw") != 0 && strcmp(opt, "ro") != 0 &&
		    strcmp(opt, "seclabel") != 0 && strncmp(opt, "uid=", 4) != 0 &&
		    strncmp(opt, "gid=", 4) != 0 && o + strlen(opt) + 2 < len)
			o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", opt);
}

static int under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (strcmp(dir, "/") == 0)
		return 1;
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static void mkdirs(const char *path)
{
	char buf[PATH_MAX * 2];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(buf, 0755);
			*p = '/';
		}
	mkdir(buf, 0755);
}

/* 0 when dir can hold the scratch tmpfs: a directory with no mount below it to bind from,
 * and no mount on it unless a renewed one. */
static int scratch_ok(const char *dir, const struct mnt *mounts, size_t nmounts,
		      const char *const *renew, int nrenew)
{
	struct stat st;

	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return -1;
	for (size_t m = 0; m < nmounts; m++) {
		int renewed = 0;
		for (int r = 0; r < nrenew; r++)
			renewed |= strcmp(renew[r], mounts[m].dev) == 0;
		if (strcmp(mounts[m].point, dir) == 0 ? !renewed : under(mounts[m].point, dir))
			return -1;
	}
	return 0;
}

static int pick_scratch(const struct mnt *mounts, size_t nmounts, const char *const *renew,
			int nrenew, char *out, size_t len)
{
	static const char *const preferred[] = { "/tmp", "/var/tmp", "/run", "/mnt", "/opt",
						 "/srv", "/home", "/root", NULL };
	struct dirent *e;
	DIR *d;

	for (int i = 0; preferred[i]; i++)
		if (scratch_ok(preferred[i], mounts, nmounts, renew, nrenew) == 0)
			return snprintf(out, len, "%s", preferred[i]) < 0 ? -1 : 0;
	if ((d = opendir("/")) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char dir[NAME_MAX + 2];
		if (e->d_name[0] == '.')
			continue;
		snprintf(dir, sizeof(dir), "/%s", e->d_name);
		if (scratch_ok(dir, mounts, nmounts, renew, nrenew) == 0) {
			snprintf(out, len, "%s", dir);
			closedir(d);
			return 0;
		}
	}
	closedir(d);
	return -1;
}

static int renewed(const char *dev, const char *const *renew, int nrenew)
{
	for (int r = 0; r < nrenew; r++)
		if (strcmp(renew[r], dev) == 0)
			return 1;
	return 0;
}

/* Mount a fresh tmpfs on top of each renewed one, where it is. 1 done; 0 when a mount sits
 * below a renewed tmpfs (it would be hidden: the caller builds a new root instead). */
static int fresh_in_place(const struct mnt *mounts, size_t nmounts, const char *const *renew,
			  int nrenew)
{
	for (size_t i = 0; i < nmounts; i++)
		for (size_t j = 0; j < nmounts; j++)
			if (i != j && renewed(mounts[i].dev, renew, nrenew) &&
			    strcmp(mounts[j].point, mounts[i].point) != 0 &&
			    under(mounts[j].point, mounts[i].point))
				return 0;
	for (size_t i = 0; i < nmounts; i++) {
		char opts[512];
		if (!renewed(mounts[i].dev, renew, nrenew) || strcmp(mounts[i].fstype, "tmpfs") != 0)
			continue;
		tmpfs_data(mounts[i].super, opts, sizeof(opts));
		if (mount("tmpfs", mounts[i].point, "tmpfs", mount_flags(mounts[i].flags), opts) < 0)
			die("cannot mount a fresh tmpfs on", mounts[i].point);
	}
	return 1;
}

/* What the helper works with, phase to phase. */
struct layer {
	const char *renew[MAX_RENEW];  /* --renew: the runtime's own tmpfs mounts */
	int nrenew;
	int share;                     /* --share: a plain copy of the container's namespace */
	long pid;                      /* --pid: the container's first process */
	char cwd[PATH_MAX];            /* its working directory, where the step starts */
	struct mnt *mounts;            /* the container's mounts, in mountinfo order */
	size_t nmounts;
	struct mnt *rootmnt;           /* the last one mounted on / */
	char root[NAME_MAX + 8];       /* the step's new root, in the scratch tmpfs */
};

static int parse_args(struct layer *l, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--pid") == 0 && i + 1 < argc)
			l->pid = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--renew") == 0 && i + 1 < argc && l->nrenew < MAX_RENEW)
			l->renew[l->nrenew++] = argv[++i];
		else if (strcmp(argv[i], "--share") == 0)
			l->share = 1;
		else
			return -1;
	}
	return 0;
}

/* A job signal must not stop it half way. */
static void ignore_signals(void)
{
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP && s != SIGCHLD)
			signal(s, SIG_IGN);
}

/* Join the container's namespaces, read its mounts there, then make the step's mount
 * namespace: a private copy of the container's. */
static void enter_container(struct layer *l)
{
	char link[64];
	ssize_t len;

	if (setns(LAYER_FD_USERNS, CLONE_NEWUSER) < 0)
		die("cannot join the container's user namespace", NULL);
	if (setns(LAYER_FD_MNTNS, CLONE_NEWNS) < 0)
		die("cannot join the container's mount namespace", NULL);
	snprintf(link, sizeof(link), "/proc/%ld/cwd", l->pid);
	if (l->pid > 0 && (len = readlink(link, l->cwd, sizeof(l->cwd) - 1)) > 0 &&
	    l->cwd[0] == '/')
		l->cwd[len] = '\0';
	else
		snprintf(l->cwd, sizeof(l->cwd), "/");
	if (l->share) {
		/* Same owner (the container's user namespace): the copy keeps every mount,
		 * flag and propagation as the container has them. */
		if (unshare(CLONE_NEWNS) < 0)
			die("cannot make a mount namespace for the step", NULL);
		return;
	}
	/* Read in the container's own namespace: a copy (unshare) loses "unbindable". */
	l->mounts = read_mounts(&l->nmounts);
	if (unshare(CLONE_NEWNS) < 0)
		die("cannot make a mount namespace for the step", NULL);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("cannot make the step's mounts private", NULL);
	for (size_t i = 0; i < l->nmounts; i++)
		if (strcmp(l->mounts[i].point, "/") == 0)
			l->rootmnt = &l->mounts[i];   /* the last one mounted on / is the root */
	if (l->rootmnt == NULL) {
		errno = ENOENT;
		die("cannot find the container's root in", "/proc/self/mountinfo");
	}
}

/* Scratch space for the upper layer, mounted on a directory of the container's root:
 * the overlay's lower layer is the root's own filesystem, which a mount on top does not
 * change. Not on a directory that holds mounts to bind again from there. Then the
 * overlay, on l->root. */
static void make_overlay(struct layer *l)
{
	/* The scratch directory is a top-level one of the root (pick_scratch): /NAME. */
	char scratch[NAME_MAX + 2], upper[NAME_MAX + 8], work[NAME_MAX + 8];
	char data[PATH_MAX * 3 + 64];
	struct stat st;

	if (pick_scratch(l->mounts, l->nmounts, l->renew, l->nrenew, scratch,
			 sizeof(scratch)) < 0) {
		errno = ENOENT;
		die("no top-level directory of the container's root is free for the step's "
		    "scratch space", NULL);
	}
	if (mount("squall-layer", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") < 0)
		die("cannot mount the step's scratch tmpfs on", scratch);
	snprintf(upper, sizeof(upper), "%s/u", scratch);
	snprintf(work, sizeof(work), "%s/w", scratch);
	snprintf(l->root, sizeof(l->root), "%s/r", scratch);
	if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 || mkdir(l->root, 0755) < 0)
		die("cannot create the step's layer directories in", scratch);
	/* The upper directory's root takes the owner and mode of the container's root. */
	if (stat("/", &st) == 0) {
		if (chmod(upper, st.st_mode & 07777) < 0 ||
		    lchown(upper, st.st_uid, st.st_gid) < 0) {
			/* an unmapped owner: the layer still works */
		}
	}
	snprintf(data, sizeof(data), "lowerdir=/,upperdir=%s,workdir=%s,userxattr", upper, work);
	if (mount("overlay", l->root, "overlay", MS_NOSUID | MS_NODEV, data) < 0) {
		snprintf(data, sizeof(data), "lowerdir=/,upperdir=%s,workdir=%s", upper, work);
		if (mount("overlay", l->root, "overlay", MS_NOSUID | MS_NODEV, data) < 0)
			die("the kernel refused an overlay on the container's root", NULL);
	}
}

/* Every other mount again in the new root: renewed tmpfs mounts fresh and empty, the
 * rest bound (recursively: what is below a bound one comes with it). */
static void mount_again(const struct layer *l)
{
	char covered[256][PATH_MAX / 16];
	size_t ncovered = 0;

	for (size_t i = 0; i < l->nmounts; i++) {
		const struct mnt *m = &l->mounts[i];
		char target[PATH_MAX * 2];
		int skip = 0;

		if (m == l->rootmnt || strcmp(m->point, "/") == 0)
			continue;
		for (size_t c = 0; c < ncovered && !skip; c++)
			skip = under(m->point, covered[c]);
		if (skip)
			continue;
		snprintf(target, sizeof(target), "%s%s", l->root, m->point);
		mkdirs(target);
		if (renewed(m->dev, l->renew, l->nrenew) && strcmp(m->fstype, "tmpfs") == 0) {
			char opts[512];
			tmpfs_data(m->super, opts, sizeof(opts));
			if (mount("tmpfs", target, "tmpfs", mount_flags(m->flags), opts) < 0)
				die("cannot mount a fresh tmpfs on", m->point);
			continue;
		}
		if (mount(m->point, target, NULL, MS_BIND | MS_REC, NULL) < 0)
			die("cannot bind the container's mount", m->point);
		if (ncovered < sizeof(covered) / sizeof(covered[0]) &&
		    strlen(m->point) < sizeof(covered[0]))
			snprintf(covered[ncovered++], sizeof(covered[0]), "%s", m->point);
	}
}

/* Into the new root (read-only when the container's is). */
static void switch_root(const struct layer *l)
{
	if (has_option(l->rootmnt->flags, "ro") &&
	    mount(NULL, l->root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
		  NULL) < 0)
		die("cannot make the step's root read-only", NULL);
	if (chdir(l->root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		die("cannot switch to the step's root", NULL);
}

/* Give back the propagation the private copy took away (--container-mounts=...:unbindable),
 * parents first, as mountinfo lists them; then into the container's working directory. */
static void restore(const struct layer *l)
{
	for (size_t i = 0; i < l->nmounts; i++)
		if (l->mounts[i].propagation != 0 && strcmp(l->mounts[i].point, "/") != 0 &&
		    mount(NULL, l->mounts[i].point, NULL, l->mounts[i].propagation, NULL) < 0)
			die("cannot restore the propagation of", l->mounts[i].point);
	if (chdir(l->cwd) < 0 && chdir("/") < 0)
		die("cannot change to", l->cwd);
}

/* "ready PID" to the plugin, then hold the layer until it lets go (protocol.h). */
static void hand_over(void)
{
	char ready[32], byte;
	int n = snprintf(ready, sizeof(ready), LAYER_MSG_READY " %d\n", (int)getpid());
	ssize_t len;

	if (write(LAYER_FD_READY, ready, (size_t)n) != n)
		die("cannot tell the plugin", NULL);
	close(LAYER_FD_READY);
	while ((len = read(LAYER_FD_RELEASE, &byte, 1)) != 0)
		if (len < 0 && errno != EINTR)
			break;
}

int main(int argc, char **argv)
{
	struct layer l;

	memset(&l, 0, sizeof(l));
	l.pid = -1;
	if (parse_args(&l, argc, argv) < 0) {
		fprintf(stderr, "squall: " PROG " is run by the squall SPANK plugin "
			"(--pid PID [--renew MAJ:MIN]... | --share)\n");
		return 2;
	}
	ignore_signals();
	enter_container(&l);
	if (l.share) {
		if (chdir(l.cwd) < 0 && chdir("/") < 0)
			die("cannot change to", l.cwd);
		hand_over();
		return 0;
	}
	/* A read-only root has nothing to renew: the step keeps it, and only gets fresh
	 * tmpfs mounts, on top of the container's (which its tasks then cannot reach). */
	if (!has_option(l.rootmnt->flags, "ro") ||
	    !fresh_in_place(l.mounts, l.nmounts, l.renew, l.nrenew)) {
		make_overlay(&l);
		mount_again(&l);
		switch_root(&l);
	}
	restore(&l);
	free(l.mounts);
	hand_over();
	return 0;
}
