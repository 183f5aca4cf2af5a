/*
 * imageref_archive.h: the archive and layout forms of an image reference
 * (docker-archive:FILE, oci-archive:FILE, oci:DIR[:TAG]; grammar in imageref.h).
 * Internal to imageref.c: no .cdef, Python reaches them through sq_imgref_parse_as.
 */
#ifndef SQUALL_CORE_IMAGEREF_ARCHIVE_H
#define SQUALL_CORE_IMAGEREF_ARCHIVE_H

#include <stddef.h>

#include "imageref.h"

/* 1: text names no transport (out untouched); 0: out filled; -1: error in err. */
int sq_imgref_archive(const char *text, struct sq_image_ref *out, char *err, size_t errlen);

/* Whether text starts with docker-archive:, oci-archive: or oci: (a registry reference's
 * canonical form then takes docker:// in front, so that it parses back to itself). */
int sq_imgref_has_transport(const char *text);

/* --container-image's one-line refusal of a parsed archive: build it with sqshbuild.
 * Returns -1. */
int sq_imgref_refuse_archive(const char *text, int kind, char *err, size_t errlen);

#endif
