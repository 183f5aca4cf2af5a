/*
 * save.h: --container-save, written once per step (by the node holding node id 0),
 * atomically: `enroot export` into a hidden temporary file beside the target, then a
 * rename done as the job user, so readers never see half an image and a failure leaves
 * the old file in place.
 */
#ifndef SQUALL_PLUGIN_SAVE_H
#define SQUALL_PLUGIN_SAVE_H

#include <stddef.h>
#include <stdint.h>

#include "named.h"

/* Can the calling user write path? Its directory must exist and be writable, and path
 * must not be a directory. 0 ok, -1 with err naming the path and the fix. */
int sq_save_check(const char *path, char *err, size_t errlen);

int sq_save_export(const struct sq_runtime *rt, const char *container, const char *path,
		   uint32_t jobid, uint32_t stepid, char *err, size_t errlen);

#endif
