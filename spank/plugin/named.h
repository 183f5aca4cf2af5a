/*
 * named.h: --container-name, with Pyxis's Enroot container names.
 *
 * The runtime's container is  pyxis_NAME  (container_scope=global, the default) or
 * pyxis_JOBID_NAME  (container_scope=job; the job epilog removes them), as Pyxis names
 * them, so that sites' epilogs and users' `enroot list/remove/export/exec` keep working.
 * A step's own container (created for --container-save, or loaded with use_enroot_load) is
 * pyxis_JOBID.STEPID, as Pyxis names an unnamed container.
 *
 * The image a named container was made from is kept beside it, in the per-user runtime
 * directory on the node: image-<runtime name> holds "IDENTITY<TAB>IMAGE TEXT" (image.h).
 *   auto / no_exec: exists -> reuse it; made from another image than --container-image
 *                   -> reused as it is, as Pyxis does, with a one-line warning naming
 *                   both images (container_name_strict=1: an error instead); none ->
 *                   `enroot create` (or `enroot load`), then the record is written.
 *   create:         exists -> error (as Pyxis); none -> create.
 *   auto / exec:    when another step on this node runs that container (running.h), the
 *                   step joins it instead (exec fails when none runs). no_exec never
 *                   joins; create never does.
 * Without --container-image an existing container is reused as it is; none is an error.
 * No record (made before squall, or the node rebooted): reused without a check.
 */
#ifndef SQUALL_PLUGIN_NAMED_H
#define SQUALL_PLUGIN_NAMED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "enroot.h"

/* Pyxis's runtime names. 0 ok, -1 too long. */
int sq_named_runtime_name(int scope_job, uint32_t jobid, const char *name, char *buf,
			  size_t buflen);
int sq_named_step_name(uint32_t jobid, uint32_t stepid, char *buf, size_t buflen);

/* Is NAME of the form JOBID.STEPID (digits '.' digits)? Then --container-name attaches to
 * that step's running container. On 1, *jobid and *stepid are set. */
int sq_named_is_step(const char *name, uint32_t *jobid, uint32_t *stepid);

/* What a named container is made from. */
struct sq_named_image {
	const char *text;        /* --container-image as given; NULL: none given */
	const char *path;        /* squashfs file to `enroot create` from, or NULL */
	const char *load_uri;    /* `enroot load` this URI instead (use_enroot_load), or NULL */
	const char *identity;    /* image.h identity; NULL when no image was given */
};

/* Which named container a step asks for. */
struct sq_named_query {
	const char *runtime_dir;     /* the user's runtime directory: the name's records */
	const char *runtime_name;    /* the runtime's name for it (sq_named_runtime_name) */
	const char *name;            /* --container-name as given, for messages */
	int mode;                    /* enum sq_name_mode */
	int strict;                  /* plugstack container_name_strict */
	struct sq_named_image img;   /* the step's image */
};

/* Where the running instance of a named container is, from its record (not yet checked
 * alive): its first process and the namespace holder's. */
struct sq_named_found {
	pid_t pid;
	unsigned long long starttime;
	pid_t nspid;
	unsigned long long nsstart;
};

/* Find or make the container q->runtime_name; *target (heap) is the name to start.
 * warn: "" or one warning line (another image, reused). */
int sq_named_prepare(const struct sq_runtime *rt, const struct sq_named_query *q,
		     char **target, char *warn, size_t warnlen, char *err, size_t errlen);

/* The running instance of q->runtime_name to join, from its record: 1 found (*found),
 * 0 none (start one), -1 with err (NAME:exec and none runs; or another image with
 * container_name_strict=1). warn as for sq_named_prepare. */
int sq_named_find_running(const struct sq_named_query *q, struct sq_named_found *found,
			  char *warn, size_t warnlen, char *err, size_t errlen);

/* The error for NAME:exec when nothing of that name runs on the node. */
void sq_named_exec_none(const char *name, char *err, size_t errlen);

/* Remember which image runtime_name was made from (see above). 0 ok, -1 with err. */
int sq_named_record_image(const char *runtime_dir, const char *runtime_name,
			  const char *identity, const char *image_text, char *err, size_t errlen);

/* Remove every container whose runtime name starts with prefix (e.g. "pyxis_42_"), and
 * its image record. Returns the number removed, -1 when listing failed. */
int sq_named_remove_prefix(const struct sq_runtime *rt, const char *runtime_dir,
			   const char *prefix, char *err, size_t errlen);

/* 1 when `enroot list` names runtime_name (0 when not, or when listing failed). */
int sq_named_exists(const struct sq_runtime *rt, const char *runtime_name);

/* `enroot create -n name image`; 0 ok, -1 with the runtime's last lines. */
int sq_named_create(const struct sq_runtime *rt, const char *name, const char *image,
		    char *err, size_t errlen);
/* `enroot load -n name uri` (use_enroot_load); 0 ok, -1 with the runtime's last lines. */
int sq_named_load(const struct sq_runtime *rt, const char *name, const char *uri, char *err,
		  size_t errlen);
/* `enroot remove -f name`; 0 ok. */
int sq_named_remove(const struct sq_runtime *rt, const char *name, char *err, size_t errlen);

#endif
