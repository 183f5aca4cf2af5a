/*
 * imageref.h: --container-image values.
 *
 *  /path or ./path            a squashfs file (kind FILE; only the text is checked here)
 *  dockerd://NAME[:TAG]       an image of the local Docker daemon (kind DOCKERD)
 *  [docker://][USER@][REGISTRY#]IMAGE[:TAG][@sha256:HEX]     Enroot form
 *  [docker://][REGISTRY/]NAME[:TAG][@sha256:HEX]             Docker form
 *
 * A first path component holding '.' or ':', or equal to "localhost", is a registry
 * (Docker's rule); otherwise the registry is Docker Hub: registry-1.docker.io, and a
 * one-component name gets "library/" (ubuntu:24.04 -> registry-1.docker.io,
 * library/ubuntu, 24.04). docker.io and index.docker.io mean Docker Hub too.
 * The tag defaults to "latest" unless a digest is given. Grammar (OCI distribution):
 * repository components [a-z0-9]+((.|_|__|-+)[a-z0-9]+)*, at most 255 bytes in all;
 * tag [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; digest sha256: + 64 lower-case hex digits;
 * registry HOST[:PORT] with HOST made of [A-Za-z0-9-] labels joined by '.'.
 * USER (for Enroot's credentials lookup, e.g. $oauthtoken) is printable ASCII without
 * '@', '#', '/', ':' and is not part of the canonical form.
 *
 * Canonical form:
 *   FILE      the path as given
 *   REGISTRY  REGISTRY/REPOSITORY[:TAG][@DIGEST]   e.g. registry-1.docker.io/library/ubuntu:24.04
 *             (REGISTRY#REPOSITORY... when the registry has no '.' or ':' and is not
 *             localhost, e.g. myreg#team/img:latest: the canonical form parses back to itself)
 *   DOCKERD   dockerd://[REGISTRY/]NAME[:TAG][@DIGEST]  (no Docker Hub expansion: the daemon's own names)
 */
#ifndef SQUALL_CORE_IMAGEREF_H
#define SQUALL_CORE_IMAGEREF_H

#include <stddef.h>

enum sq_image_kind {
	SQ_IMAGE_FILE = 0,
	SQ_IMAGE_REGISTRY,
	SQ_IMAGE_DOCKERD
};

#define SQ_DOCKER_HUB "registry-1.docker.io"

/* Strings owned by the struct (free with sq_imgref_free); NULL when absent. */
struct sq_image_ref {
	int kind;            /* enum sq_image_kind */
	char *path;          /* FILE only */
	char *user;          /* REGISTRY only, when USER@ was given */
	char *registry;      /* REGISTRY: always set; DOCKERD: when the name has one */
	char *repository;    /* e.g. library/ubuntu, nvidia/pytorch */
	char *tag;           /* "latest" when neither tag nor digest was given */
	char *digest;        /* sha256:<64 hex> */
	char *canonical;     /* always set on success */
};

/* Parse text into out (need not be initialised). 0 ok; -1 error with err naming
 * --container-image, the part that is wrong and the expected form. On error out is
 * empty; sq_imgref_free is safe either way. */
int sq_imgref_parse(const char *text, struct sq_image_ref *out, char *err, size_t errlen);
void sq_imgref_free(struct sq_image_ref *ref);

#endif
