/*
 * named.h: --container-name, bound to the image it was made from.
 *
 * The runtime's container is called  squall@SCOPE@NAME@IDENTITY  where SCOPE is
 * "job<JOBID>" (container_scope=job) or "global", and IDENTITY the image's identity
 * (image.h). '@' cannot appear in a --container-name, so the parts never blur.
 *   auto / no_exec: same image -> reuse; none yet -> `enroot create`; a container of
 *                   that NAME from another image -> error (never a stale rootfs).
 *   create:         same image already there -> error (as Pyxis); another image ->
 *                   the old container is removed and a fresh one created.
 *   auto / exec:    when another step on this node runs that container (running.h),
 *                   the step joins it instead (same image, or no --container-image);
 *                   exec fails when none runs. no_exec never joins; create never does.
 * Without --container-image the one container of that NAME is reused as it is.
 */
#ifndef SQUALL_PLUGIN_NAMED_H
#define SQUALL_PLUGIN_NAMED_H

#include <stddef.h>
#include <sys/types.h>

#include "enroot.h"

/* Find or create the container; *target (heap) is the name to start.
 * image_path/identity NULL when no image was given. */
int sq_named_prepare(const struct sq_runtime *rt, const char *scope, const char *name, int mode,
		     const char *image_text, const char *image_path, const char *identity,
		     char **target, char *err, size_t errlen);

/* The running instance to join, from the records in runtime_dir (running.h): 1 found
 * (*running: heap runtime name; *pid, *starttime from its record, not yet checked alive),
 * 0 none (start one), -1 with err (NAME:exec and nothing suitable runs). */
int sq_named_find_running(const char *runtime_dir, const char *scope, const char *name,
			  int mode, const char *image_text, const char *identity, char **running,
			  pid_t *pid, unsigned long long *starttime, char *err, size_t errlen);

/* The error for NAME:exec when the recorded process turned out to be gone. */
void sq_named_exec_none(const char *name, char *err, size_t errlen);

/* Remove every container whose runtime name starts with prefix (e.g. "squall@job42@").
 * Returns the number removed, -1 when listing failed. */
int sq_named_remove_prefix(const struct sq_runtime *rt, const char *prefix, char *err, size_t errlen);

/* `enroot create -n name image`; 0 ok, -1 with the runtime's last lines. */
int sq_named_create(const struct sq_runtime *rt, const char *name, const char *image,
		    char *err, size_t errlen);
/* `enroot remove -f name`; 0 ok. */
int sq_named_remove(const struct sq_runtime *rt, const char *name, char *err, size_t errlen);

#endif
