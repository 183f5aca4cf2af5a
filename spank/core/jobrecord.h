/*
 * jobrecord.h: the word that keeps an image a job ran in its AdminComment (docs/admin.md).
 *
 * "squall-image=REF@sha256:HEX" for a registry image (REF as the user gave it; the digest
 * from the cache entry's name, sha256-HEX[-VARIANT].sqsh; a REF that already names its
 * digest is not given it twice), "squall-image=PATH@size=N,mtime=ISO8601Z" for a .sqsh
 * named by path. Words are space separated in the comment: a space or '%' in REF or PATH
 * is percent-encoded.
 */
#ifndef SQUALL_CORE_JOBRECORD_H
#define SQUALL_CORE_JOBRECORD_H

#include <stddef.h>

/* 0 with out filled, -1 when it does not fit in outlen (out is then ""). */
int sq_jobrecord_entry(const char *ref, const char *path, int from_registry, long long size,
		       long long mtime, char *out, size_t outlen);

#endif
