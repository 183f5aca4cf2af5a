/*
 * mounts_exist.h: the one mount check that touches the filesystem.
 *
 * Whether a bind source exists depends on who looks: the plugin calls this as the job
 * user (in srun, or after dropping privileges), never as root.
 */
#ifndef SQUALL_CORE_MOUNTS_EXIST_H
#define SQUALL_CORE_MOUNTS_EXIST_H

#include <stddef.h>

#include "mounts.h"

/* stat() every bind source of list. 0 when all exist; -1 with err naming the first one
 * that does not (or cannot be reached) and the errno text. tmpfs/umount are skipped. */
int sq_mounts_check_sources(const struct sq_mount_list *list, char *err, size_t errlen);

#endif
