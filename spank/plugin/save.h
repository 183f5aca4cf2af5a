/*
 * save.h: --container-save, written once per step (by the node holding node id 0),
 * atomically and only where the job user decides: in a child that has become the user, the
 * target's directory is opened and checked (writable by the user; not world-writable
 * unless sticky), `enroot export` writes into a fresh private 0700 directory made there
 * with an unguessable name (random bytes), addressed as /proc/self/fd/3/..., and the image
 * is renamed into place relative to the directory's descriptor. An existing target is
 * replaced only when it is a regular file of the user's (never a link, a FIFO, another
 * user's file): else one line names the path and the fix. A failure leaves the old file.
 */
#ifndef SQUALL_PLUGIN_SAVE_H
#define SQUALL_PLUGIN_SAVE_H

#include <stddef.h>
#include <stdint.h>

#include "named.h"

/* Can the caller (its effective ids: user_init) save to path? Its directory must exist,
 * be writable and checked as above; an existing path must be a regular file of the
 * caller's. 0 ok, -1 with err naming the path and the fix. */
int sq_save_check(const char *path, char *err, size_t errlen);

/* The save, in a child that becomes rt->cred (NULL: the caller, already the user). 0 ok,
 * -1 with err. */
int sq_save_export(const struct sq_runtime *rt, const char *container, const char *path,
		   uint32_t jobid, uint32_t stepid, char *err, size_t errlen);

#endif
