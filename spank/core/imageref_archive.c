/* imageref_archive.c: docker-archive:, oci-archive: and oci: references, which name files. */
#include <stdlib.h>
#include <string.h>

#include "imageref_archive.h"
#include "strbuf.h"

#define WHAT "--container-image"

/* skopeo's and podman's transport names: each always means its transport, never a
 * registry host spelt the same (imageref.h). */
static const struct transport {
	const char *prefix;
	int kind;
	const char *names;   /* what the plugin's refusal calls it */
	const char *empty;   /* the error for an empty path */
} transports[] = {
	{ "docker-archive:", SQ_IMAGE_DOCKER_ARCHIVE, "a Docker archive",
	  "names no file (write docker-archive:FILE.tar)" },
	{ "oci-archive:", SQ_IMAGE_OCI_ARCHIVE, "an OCI archive",
	  "names no file (write oci-archive:FILE.tar)" },
	{ "oci:", SQ_IMAGE_OCI_DIR, "an OCI layout directory",
	  "names no directory (write oci:DIR[:TAG])" },
};

#define NTRANSPORTS (sizeof(transports) / sizeof(transports[0]))

static const struct transport *find_prefix(const char *text)
{
	size_t i;

	for (i = 0; i < NTRANSPORTS; i++)
		if (strncmp(text, transports[i].prefix, strlen(transports[i].prefix)) == 0)
			return &transports[i];
	return NULL;
}

int sq_imgref_has_transport(const char *text)
{
	return find_prefix(text) != NULL;
}

static int tag_char(char c, int first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || (!first && (c == '.' || c == '-'));
}

/* oci:'s TAG: a registry tag's grammar. The hint is the way to a directory named with ':'. */
static int check_oci_tag(const char *text, const char *tag, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], tshow[SQ_SHOW_MAX];
	size_t n = strlen(tag), i;
	int ok = n >= 1 && n <= 128;

	for (i = 0; ok && i < n; i++)
		ok = tag_char(tag[i], i == 0);
	if (ok)
		return 0;
	sq_show(text, show, sizeof(show));
	if (n == 0)
		return sq_errf(err, errlen, WHAT ": '%s': empty tag after ':' (give a tag or drop "
			       "the ':'; a directory whose name ends in ':' takes a trailing '/')",
			       show);
	return sq_errf(err, errlen, WHAT ": '%s': invalid tag '%s' (a tag is 1-128 characters "
		       "[A-Za-z0-9_.-], not starting with '.' or '-'; a directory whose name holds "
		       "':' takes a trailing '/')", show, sq_show(tag, tshow, sizeof(tshow)));
}

int sq_imgref_archive(const char *text, struct sq_image_ref *out, char *err, size_t errlen)
{
	const struct transport *t = find_prefix(text);
	const char *rest, *colon, *tag = NULL;
	char show[SQ_SHOW_MAX];
	size_t pathlen;

	if (t == NULL)
		return 1;
	rest = text + strlen(t->prefix);
	pathlen = strlen(rest);
	colon = strrchr(rest, ':');
	/* oci:DIR:TAG from the text alone: the core opens no file, and a node where DIR:TAG
	 * happens to be a directory must not read it differently. */
	if (t->kind == SQ_IMAGE_OCI_DIR && colon != NULL && strchr(colon, '/') == NULL) {
		pathlen = (size_t)(colon - rest);
		tag = colon + 1;
	}
	if (pathlen == 0)
		return sq_errf(err, errlen, WHAT ": '%s': %s", sq_show(text, show, sizeof(show)),
			       t->empty);
	if (tag != NULL && check_oci_tag(text, tag, err, errlen) != 0)
		return -1;
	out->kind = t->kind;
	out->path = sq_strndup(rest, pathlen);
	out->tag = tag != NULL ? strdup(tag) : NULL;
	out->canonical = strdup(text);
	if (out->path == NULL || out->canonical == NULL || (tag != NULL && out->tag == NULL))
		return sq_errf(err, errlen, WHAT ": out of memory");
	return 0;
}

int sq_imgref_refuse_archive(const char *text, int kind, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	const char *names = "an archive";
	size_t i;

	for (i = 0; i < NTRANSPORTS; i++)
		if (transports[i].kind == kind)
			names = transports[i].names;
	sq_show(text, show, sizeof(show));
	/* Pyxis takes none of these either: Enroot imports from registries and daemons. */
	return sq_errf(err, errlen, WHAT ": '%s': %s is not an image the plugin runs: build a "
		       "squashfs from it first, sqshbuild build -o IMAGE.sqsh %s, then pass "
		       "--container-image=./IMAGE.sqsh (a registry host of that name is written "
		       "with docker:// in front)", show, names, show);
}
