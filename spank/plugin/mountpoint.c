/* mountpoint.c: see mountpoint.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "mountpoint.h"

#define KEEP_IDS ((uid_t)-1)

/* Remount the container's root read-write (rw 1) or back read-only, its other flags kept. */
static int root_writable(int rw)
{
	static const struct { unsigned long st, ms; } keep[] = {
		{ ST_NOSUID, MS_NOSUID }, { ST_NODEV, MS_NODEV }, { ST_NOEXEC, MS_NOEXEC },
		{ ST_NOATIME, MS_NOATIME }, { ST_NODIRATIME, MS_NODIRATIME },
		{ ST_RELATIME, MS_RELATIME } };
	unsigned long flags = MS_REMOUNT | MS_BIND | (rw ? 0 : MS_RDONLY);
	struct statvfs v;

	if (statvfs("/", &v) < 0)
		return -1;
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		if (v.f_flag & keep[i].st)
			flags |= keep[i].ms;
	return mount(NULL, "/", NULL, flags, NULL);
}

static void as_root(uid_t fsuid)
{
	if (fsuid != KEEP_IDS)
		setfsuid(0);
}

static void as_user(uid_t fsuid)
{
	if (fsuid != KEEP_IDS)
		setfsuid(fsuid);
}

/* mkdir; on a read-only root, once, the root made read-write first (*flipped). */
static int make_dir(const char *path, mode_t mode, uid_t fsuid, int *flipped)
{
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != EROFS || *flipped)
		return -1;
	as_root(fsuid);
	if (root_writable(1) < 0) {
		int saved = errno;
		as_user(fsuid);
		errno = saved;
		return -1;
	}
	*flipped = 1;
	as_user(fsuid);
	return make_dir(path, mode, fsuid, flipped);
}

int sq_mount_point_make(const char *path, uid_t fsuid)
{
	char buf[4096];
	int flipped = 0, rv = 0, saved;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	as_user(fsuid);
	for (char *p = buf + 1; *p != '\0' && rv == 0; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		rv = make_dir(buf, 0755, fsuid, &flipped);
		*p = '/';
	}
	if (rv == 0)
		rv = make_dir(buf, 0700, fsuid, &flipped);
	saved = errno;
	if (flipped) {
		as_root(fsuid);
		if (root_writable(0) < 0 && rv == 0) {
			saved = errno;
			rv = -1;
		}
		as_user(fsuid);
	}
	errno = saved;
	return rv;
}
