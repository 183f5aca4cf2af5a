/*
 * imageref.h: --container-image values.
 *
 *  /path or ./path            a squashfs file (kind FILE; only the text is checked here)
 *  dockerd://NAME[:TAG]       an image of the local Docker daemon (kind DOCKERD)
 *  docker-archive:FILE        `docker save` output (kind DOCKER_ARCHIVE)
 *  oci-archive:FILE           an OCI layout in a tar file (kind OCI_ARCHIVE)
 *  oci:DIR[:TAG]              an OCI layout directory (kind OCI_DIR)
 *                             (these three for sqshbuild only: the plugin refuses them)
 *  [docker://][USER@][REGISTRY#]IMAGE[:TAG][@sha256:HEX]     Enroot form
 *  [docker://][REGISTRY/]NAME[:TAG][@sha256:HEX]             Docker form
 *
 * A first path component holding '.' or ':', or equal to "localhost", is a registry
 * (Docker's rule); otherwise the registry is Docker Hub: registry-1.docker.io, and a
 * one-component name gets "library/" (ubuntu:24.04 -> registry-1.docker.io,
 * library/ubuntu, 24.04). docker.io, index.docker.io and registry.hub.docker.com mean
 * Docker Hub too (sqshbuild took the last so before it took the core's parse).
 * The tag defaults to "latest" unless a digest is given. Grammar (OCI distribution):
 * repository components [a-z0-9]+((.|_|__|-+)[a-z0-9]+)*, at most 255 bytes in all;
 * tag [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; digest sha256: + 64 lower-case hex digits;
 * registry HOST[:PORT] with HOST made of [A-Za-z0-9-] labels joined by '.'.
 * USER (for Enroot's credentials lookup, e.g. $oauthtoken) is printable ASCII without
 * '@', '#', '/', ':' and is not part of the canonical form.
 *
 * Archives and layouts: the prefixes docker-archive:, oci-archive: and oci: (lower-case)
 * are transports, as in skopeo and podman, and win over Docker's rule: oci-archive:5000/x
 * is the file 5000/x, never the registry "oci-archive:5000" (write docker://oci-archive:
 * 5000/x for that). The rest is a path, not checked beyond being non-empty (the core
 * opens no file). oci: splits a tag at its last ':' when no '/' follows it, from the text
 * alone so that it means the same on every node: oci:/l:v1 is /l tagged v1; a directory
 * whose name holds ':' is written with a trailing '/' (oci:/data/img:v1/[:TAG]); the tag
 * follows the grammar above. Archive paths are taken whole (docker-archive:/a:b.tar).
 *
 * Canonical form:
 *   FILE      the path as given
 *   REGISTRY  REGISTRY/REPOSITORY[:TAG][@DIGEST]   e.g. registry-1.docker.io/library/ubuntu:24.04
 *             (REGISTRY#REPOSITORY... when the registry has no '.' or ':' and is not
 *             localhost, e.g. myreg#team/img:latest: the canonical form parses back to itself)
 *   DOCKERD   dockerd://[REGISTRY/]NAME[:TAG][@DIGEST]  (no Docker Hub expansion: the daemon's own names)
 *   archives  the text as given (path and tag as split above)
 */
#ifndef SQUALL_CORE_IMAGEREF_H
#define SQUALL_CORE_IMAGEREF_H

#include <stddef.h>

enum sq_image_kind {
	SQ_IMAGE_FILE = 0,
	SQ_IMAGE_REGISTRY,
	SQ_IMAGE_DOCKERD,
	SQ_IMAGE_DOCKER_ARCHIVE,
	SQ_IMAGE_OCI_ARCHIVE,
	SQ_IMAGE_OCI_DIR
};

/* Flags of sq_imgref_parse_as. */
#define SQ_IMGREF_ARCHIVES 1 /* take the archive and layout forms (sqshbuild builds them) */

#define SQ_DOCKER_HUB "registry-1.docker.io"

/* Strings owned by the struct (free with sq_imgref_free); NULL when absent. */
struct sq_image_ref {
	int kind;            /* enum sq_image_kind */
	char *path;          /* FILE and the archive kinds */
	char *user;          /* REGISTRY only, when USER@ was given */
	char *registry;      /* REGISTRY: always set; DOCKERD: when the name has one */
	char *repository;    /* e.g. library/ubuntu, nvidia/pytorch */
	char *tag;           /* "latest" when neither tag nor digest was given; OCI_DIR: as given */
	char *digest;        /* sha256:<64 hex> */
	char *canonical;     /* always set on success */
};

/* Parse text into out (need not be initialised). 0 ok; -1 error with err naming
 * --container-image, the part that is wrong and the expected form. On error out is
 * empty; sq_imgref_free is safe either way. sq_imgref_parse is --container-image's
 * parse: an archive or layout form is parsed, then refused in one line that says how to
 * build a .sqsh from it with sqshbuild. sq_imgref_parse_as with SQ_IMGREF_ARCHIVES
 * (sqshbuild's) returns it; both are one parse, so they refuse the same malformed texts. */
int sq_imgref_parse(const char *text, struct sq_image_ref *out, char *err, size_t errlen);
int sq_imgref_parse_as(const char *text, int flags, struct sq_image_ref *out, char *err,
		       size_t errlen);
void sq_imgref_free(struct sq_image_ref *ref);

#endif
