/*
 * datasets.h: squashfs datasets given to --container-mounts, mounted into the step's
 * container (core/dataset.h says which sources are datasets).
 *
 * Each is served by squashfuse running as the job user, never as root, as Enroot serves
 * a squashfs image; but the mount is the step's, made in the step's mount namespace (the
 * kept container's fresh layer, or the step's own container) once the container is ready,
 * so it is not part of the kept container's key and never appears in the node's
 * namespace:
 *   - a child of slurmstepd becomes the job user (all of its ids), opens the file (the
 *     user's right to read it, checked again, and its magic), enters the container's user
 *     namespace and opens /dev/fuse there;
 *   - its child enters the container's mount namespace, makes the mount point
 *     (mountpoint.h) and mounts a read-only FUSE filesystem there (nosuid, nodev; the
 *     kernel checks the files' modes: default_permissions), on that /dev/fuse;
 *   - the first child then runs squashfuse on the file and that /dev/fuse (libfuse's
 *     /dev/fd/N mount point: already mounted), which tells through its notify pipe that it
 *     serves. The job's signals are ignored by it; the step's end kills it (SIGKILL), and
 *     the mount goes with the step's namespace.
 */
#ifndef SQUALL_PLUGIN_DATASETS_H
#define SQUALL_PLUGIN_DATASETS_H

#include <stddef.h>
#include <sys/types.h>

#define SQ_DATASETS_MAX 16

struct sq_dataset {
	char *source;   /* the squashfs file, as given (absolute) */
	char *target;   /* where in the container */
	pid_t server;   /* squashfuse, once mounted; 0 before */
	int pidfd;      /* of server, or -1 */
};

struct sq_datasets {
	struct sq_dataset items[SQ_DATASETS_MAX];
	size_t count;
};

/* Add one. 0 ok, -1 with err (too many, out of memory). */
int sq_datasets_add(struct sq_datasets *d, const char *source, const char *target,
		    char *err, size_t errlen);

/* Mount each into the container whose user namespace is ns_user (-1: ours) and whose
 * mount namespace is ns_mnt (its root root_fd, or -1: the namespace's), for the job user uid:gid. 0 ok, -1 with err (one line naming
 * the dataset). */
int sq_datasets_mount(struct sq_datasets *d, int ns_user, int ns_mnt, int root_fd, uid_t uid,
		      gid_t gid, char *err, size_t errlen);

/* End every server and forget them all. */
void sq_datasets_end(struct sq_datasets *d);

#endif
