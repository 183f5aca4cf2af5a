/*
 * mounts.h: --container-mounts specs to Enroot fstab lines.
 *
 * Spec: ENTRY[,ENTRY...], ENTRY = SRC[:DST[:FLAGS]], FLAGS joined by '+'; as in Pyxis the
 * separators are ',' and ':' only: paths may hold spaces, and FLAGS is everything after
 * the second ':' (a tmpfs option value may hold ':').
 *  - SRC is an absolute path, a path starting with '.', "tmpfs" or "umount";
 *    SRC alone means DST=SRC (not for tmpfs/umount, which need a DST).
 *  - DST must start with '/' or '.'; it is relative to the container root, and may not
 *    be the root itself.
 *  - Bind flags: ro rw bind rbind private rprivate slave rslave shared rshared
 *    unbindable runbindable nosuid suid nodev dev noexec exec noatime atime
 *    nodiratime diratime relatime norelatime strictatime nostrictatime.
 *    tmpfs also takes the kernel's tmpfs options, passed through: NAME or NAME=VALUE
 *    (huge=, mpol=, nr_blocks=, noswap, quota, ...); size=, nr_blocks=, nr_inodes=, uid=,
 *    gid= must be numbers (with a size suffix), mode= octal.
 *    ro and rw, or bind and rbind, together are an error.
 *  - Refused anywhere: empty fields, '..' components, tabs and control bytes (an fstab
 *    line must stay one line of four fields), '\' and '$' (Enroot expands ${VAR} in
 *    fstab lines), non-UTF-8 bytes, paths of PATH_MAX bytes or more.
 *  - The same entry twice is dropped; two different entries for one target are an error.
 *
 * fstab lines produced (DST normalised to an absolute path inside the container, './x'
 * becoming '/x'; Enroot resolves it under the rootfs; a space in SRC or DST is written
 * \040, which Enroot's fstab reader turns back into a space):
 *    SRC DST none x-create=auto,rbind[,FLAGS]      bind (bind instead of rbind if asked)
 *    tmpfs DST tmpfs x-create=dir,rw,nosuid,nodev[,FLAGS]
 *    none DST none x-detach                        umount
 */
#ifndef SQUALL_CORE_MOUNTS_H
#define SQUALL_CORE_MOUNTS_H

#include <stddef.h>

enum sq_mount_type {
	SQ_MOUNT_BIND = 0,
	SQ_MOUNT_TMPFS,
	SQ_MOUNT_UMOUNT
};

/* One mount; every string is owned by the list. */
struct sq_mount {
	int type;          /* enum sq_mount_type */
	char *source;      /* absolute (or as given when no cwd), "tmpfs", or "none" for umount */
	char *target;      /* absolute, normalised: no "//", no "/./", no trailing '/' */
	char *options;     /* the comma-separated fstab options field */
	char *fstab;       /* the whole fstab line, without a newline */
};

struct sq_mount_list {
	struct sq_mount *items;
	size_t count;
};

/*
 * Parse spec into out (which need not be initialised). cwd: when not NULL, sources
 * starting with '.' are made absolute against it (lexically; no filesystem access);
 * when NULL they are kept as given. Free the result with sq_mounts_free, also after
 * an error (it is then empty). 0 ok, -1 error: err names --container-mounts, the
 * entry and the field, and says how to fix it.
 */
int sq_mounts_parse(const char *spec, const char *cwd, struct sq_mount_list *out,
		    char *err, size_t errlen);
void sq_mounts_free(struct sq_mount_list *list);

#endif
