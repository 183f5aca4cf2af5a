/*
 * dataset.h: a squashfs file given to --container-mounts is a dataset (enroot#180).
 *
 * Pyxis binds every --container-mounts source as it is. squall does the same, except for a
 * regular file whose content is a squashfs image (its magic "hsqs" at offset 0, whatever
 * its name): that one is mounted read-only at the target (plugin/dataset.h), so the
 * container sees the files inside it, not the file.
 *
 * Called as the job user (in user_init, privileges dropped), so whether the file can be read
 * is the user's answer: a regular file the user cannot read is refused (it would be of no
 * use in the container, and squall never reads or mounts it for her with root's rights).
 * A symbolic link is followed, as Pyxis's (Enroot's) bind follows it: its target is what is
 * checked and mounted, and a link whose target the user cannot read is refused, the
 * message naming both.
 */
#ifndef SQUALL_CORE_DATASET_H
#define SQUALL_CORE_DATASET_H

#include <stddef.h>

#include "mounts.h"

/* The squashfs magic, at offset 0 of the image (little-endian 0x73717368). */
#define SQ_SQUASHFS_MAGIC "hsqs"

/* 1: source is a squashfs file the caller can read (a dataset); 0: not one (a directory, a
 * plain file, a device, ...: bound as Pyxis does); -1: refused, err says why and the fix
 * in one line naming the source. */
int sq_dataset_probe(const char *source, char *err, size_t errlen);

/* 1: the mount m (a bind) is a dataset, 0: it is not, -1: refused (err): as
 * sq_dataset_probe, and a dataset with the rw flag (a squashfs cannot be written). */
int sq_dataset_check(const struct sq_mount *m, char *err, size_t errlen);

/* 1 when the first bytes of a file (len of them) are a squashfs superblock's magic. */
int sq_dataset_magic(const unsigned char *head, size_t len);

#endif
