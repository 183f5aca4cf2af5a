/*
 * mountpoint.h: make a mount point inside a container, as Enroot's x-create=dir does.
 *
 * Called in the container's mount namespace (the step's layer, or its own container),
 * with the rights to mount there. The parents are made 0755 and the directory itself 0700
 * (a mount covers it). Where the container's root is read-only (Enroot's default, set after
 * its own x-create mounts), it is remounted read-write for the mkdir and read-only again,
 * so the directories land in the container's writable layer, never in the image.
 */
#ifndef SQUALL_PLUGIN_MOUNTPOINT_H
#define SQUALL_PLUGIN_MOUNTPOINT_H

#include <sys/types.h>

/* mkdir -p path. fsuid: the directories are made with this fsuid and the remounts done
 * with fsuid 0 (a caller that is the node's root), or (uid_t)-1 for the caller's own ids
 * throughout. The fsuid is left at fsuid. 0 ok, -1 (errno). */
int sq_mount_point_make(const char *path, uid_t fsuid);

#endif
