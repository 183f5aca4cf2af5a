/*
 * image.h: from --container-image to a squashfs file the runtime can start.
 *
 * A path is checked as the job user (the caller runs with the user's ids): it must
 * exist, be a regular file (stat'ed first: a FIFO, device, directory or socket is refused
 * without being opened, core/safeopen.h), be readable and start with the squashfs magic
 * "hsqs". A registry reference
 * is handed to `sqshbuild build --quiet --cache-dir DIR --job KEY REF`, which pulls it once
 * for the whole cluster into the shared cache and prints the path; with the job's key
 * (CLUSTER-UID-JOBID) a tag is resolved once for the job and every node, later step,
 * failover attempt and requeue runs the digest it pinned (docs/images.md). It runs as the image builder
 * (builder.h) when the node has one: its own ids, groups and environment, in /. When
 * the builder may not pull the image (exit status 3: the registry refused its
 * credentials), the same command runs as the user with the job's environment, into the
 * user's own cache, as it does when there is no builder.
 * The identity (device, inode, size, mtime of the file) binds named containers to
 * the exact image they were made from.
 */
#ifndef SQUALL_PLUGIN_IMAGE_H
#define SQUALL_PLUGIN_IMAGE_H

#include <stddef.h>

#include "runcmd.h"

struct sq_image {
	char *path;           /* absolute path of the .sqsh (heap) */
	char identity[17];    /* 16 hex digits */
	int from_registry;
	int from_memo;        /* a later step's: what an earlier step got (pinmemo.h) */
	char note[2048];      /* "" or lines for srun's stderr (the builder's fallback) */
};

struct sq_image_env {
	const char *cwd;          /* for ./relative paths */
	const char *sqshbuild;    /* builder executable */
	const char *cache_dir;    /* shared cache */
	char *const *envp;        /* environment for the builder */
	const struct sq_cred *cred;
	const char *builder_conf; /* NULL: /etc/squall/builder (builder.h) */
	const char *job;          /* "" or the job's key: a tag is resolved once per job */
	int progress_s;           /* > 0: sqshbuild's progress lines every that many seconds,
				   * each given to say ("progress: ...") while the step waits:
				   * the plugin passes them on to srun from the step's first
				   * node (one line for the step, not one per node) */
	void (*say)(const char *line);
	const char *cgroup_procs; /* NULL or the step's cgroup.procs: the builder joins it and
				   * ends with the step (core/stepcg.h) */
	int srun_step;            /* srun launched the step: the build stops when srun goes
				   * (srunwatch.h); 0 for the batch step, which has no srun */
	int quiet_pin;            /* 1: leave the "job KEY pinned REF" line out of the note,
				   * as Pyxis prints no import line for a step of several
				   * tasks (the offline line is always kept) */
};

int sq_image_resolve(const char *text, const struct sq_image_env *e, struct sq_image *out,
		     char *err, size_t errlen);
/* Check that path is a squashfs file the caller can read; fills identity. `what` is the
 * flag text used in messages. */
int sq_image_check_file(const char *what, const char *path, char identity[17],
			char *err, size_t errlen);
void sq_image_free(struct sq_image *img);

/* FNV-1a 64 of s as 16 hex digits (names and identities). */
void sq_hash_hex(const char *s, size_t len, char out[17]);

#endif
