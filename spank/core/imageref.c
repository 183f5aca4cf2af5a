/* imageref.c: --container-image values to a file path or a registry reference (the forms
 * naming archives and layouts: imageref_archive.c). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "imageref.h"
#include "imageref_archive.h"
#include "quote.h"
#include "strbuf.h"

#define WHAT "--container-image"

static int is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static int is_hex_lower(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* One repository path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* */
static int component_ok(const char *s, size_t n)
{
	size_t i = 0, j;

	if (n == 0 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
		return 0;
	while (i < n) {
		if (is_lower_alnum(s[i])) {
			i++;
			continue;
		}
		/* A separator run between two alphanumerics. */
		j = i;
		while (j < n && !is_lower_alnum(s[j]))
			j++;
		if (!((j - i == 1 && (s[i] == '.' || s[i] == '_' || s[i] == '-')) ||
		      (j - i == 2 && s[i] == '_' && s[i + 1] == '_') ||
		      strspn(s + i, "-") >= j - i))
			return 0;
		i = j;
	}
	return 1;
}

static int has_upper(const char *s)
{
	for (; *s; s++)
		if (*s >= 'A' && *s <= 'Z')
			return 1;
	return 0;
}

/* extra: bytes the canonical form adds in front (Docker Hub's "library/"), so that the
 * limit holds for the repository as sent and the canonical form parses back. */
static int check_repository(const char *text, const char *repo, size_t extra, char *err,
			    size_t errlen)
{
	char show[SQ_SHOW_MAX], rshow[SQ_SHOW_MAX];
	const char *p = repo, *slash;

	sq_show(text, show, sizeof(show));
	sq_show(repo, rshow, sizeof(rshow));
	if (*repo == '\0')
		return sq_errf(err, errlen, WHAT ": '%s': empty image name (give e.g. ubuntu:24.04 "
			       "or nvcr.io#nvidia/pytorch:24.05-py3)", show);
	if (strlen(repo) + extra > 255)
		return sq_errf(err, errlen, WHAT ": '%s': repository name is %zu bytes long, the "
			       "limit is 255 (check the image name)", show, strlen(repo) + extra);
	if (has_upper(repo))
		return sq_errf(err, errlen, WHAT ": '%s': repository '%s' must be lower-case "
			       "(image names are lower-case, e.g. ubuntu:24.04)", show, rshow);
	for (;;) {
		size_t n;

		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0)
			return sq_errf(err, errlen, WHAT ": '%s': empty path component in repository "
				       "'%s' (remove the extra '/')", show, rshow);
		if (!component_ok(p, n))
			return sq_errf(err, errlen, WHAT ": '%s': invalid repository '%s' (components "
				       "are lower-case letters and digits, separated by '.', '_', '__' "
				       "or '-')", show, rshow);
		if (slash == NULL)
			return 0;
		p = slash + 1;
	}
}

static int check_tag(const char *text, const char *tag, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], tshow[SQ_SHOW_MAX];
	size_t n = strlen(tag), i;
	int ok = n >= 1 && n <= 128 && (is_alnum(tag[0]) || tag[0] == '_');

	for (i = 1; ok && i < n; i++)
		ok = is_alnum(tag[i]) || tag[i] == '_' || tag[i] == '.' || tag[i] == '-';
	if (ok)
		return 0;
	sq_show(text, show, sizeof(show));
	if (n == 0)
		return sq_errf(err, errlen, WHAT ": '%s': empty tag after ':' (give a tag such as "
			       ":latest or drop the ':')", show);
	return sq_errf(err, errlen, WHAT ": '%s': invalid tag '%s' (a tag is 1-128 characters "
		       "[A-Za-z0-9_.-], not starting with '.' or '-')", show,
		       sq_show(tag, tshow, sizeof(tshow)));
}

static int check_digest(const char *text, const char *dg, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], dshow[SQ_SHOW_MAX];
	size_t i;

	if (strncmp(dg, "sha256:", 7) == 0 && strlen(dg) == 71) {
		for (i = 7; i < 71 && is_hex_lower(dg[i]); i++)
			;
		if (i == 71)
			return 0;
	}
	sq_show(text, show, sizeof(show));
	sq_show(dg, dshow, sizeof(dshow));
	if (strncmp(dg, "sha256:", 7) != 0)
		return sq_errf(err, errlen, WHAT ": '%s': unsupported digest '%s' (use "
			       "@sha256: followed by 64 lower-case hex digits)", show, dshow);
	return sq_errf(err, errlen, WHAT ": '%s': malformed digest '%s' (sha256: must be "
		       "followed by exactly 64 lower-case hex digits)", show, dshow);
}

/* HOST[:PORT], HOST = labels of [A-Za-z0-9-] joined by '.', no label starting or
 * ending with '-'. */
static int check_registry(const char *text, const char *reg, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], rshow[SQ_SHOW_MAX];
	const char *colon = strchr(reg, ':');
	size_t hostlen = colon ? (size_t)(colon - reg) : strlen(reg), i, label = 0;
	int ok = hostlen > 0 && hostlen <= 253;

	for (i = 0; ok && i < hostlen; i++) {
		char c = reg[i];

		if (c == '.') {
			ok = label > 0 && reg[i - 1] != '-';
			label = 0;
		} else if (is_alnum(c) || c == '-') {
			ok = !(label == 0 && c == '-');
			label++;
		} else {
			ok = 0;
		}
	}
	ok = ok && label > 0 && reg[hostlen - 1] != '-';
	if (ok && colon != NULL) {
		const char *p = colon + 1;
		long port = 0;

		ok = *p != '\0' && strlen(p) <= 5;
		for (; ok && *p; p++) {
			ok = *p >= '0' && *p <= '9';
			port = port * 10 + (*p - '0');
		}
		ok = ok && port >= 1 && port <= 65535;
	}
	if (ok)
		return 0;
	sq_show(text, show, sizeof(show));
	return sq_errf(err, errlen, WHAT ": '%s': invalid registry '%s' (use HOST or HOST:PORT, "
		       "e.g. nvcr.io or localhost:5000)", show, sq_show(reg, rshow, sizeof(rshow)));
}

/* USER of USER@: printable ASCII, none of '@#/:' (Enroot looks it up in its credentials). */
static int check_user(const char *text, const char *user, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	const char *p;

	for (p = user; *p; p++)
		if (*p <= 0x20 || *p >= 0x7f || strchr("@#/:", *p) != NULL)
			break;
	if (*user != '\0' && *p == '\0')
		return 0;
	sq_show(text, show, sizeof(show));
	return sq_errf(err, errlen, WHAT ": '%s': invalid user before '@' (use USER@REGISTRY#IMAGE "
		       "with a user name of printable characters)", show);
}

/* "sha256:..." or another ALGO: -- the text after the last '@' reads as a digest. */
static int looks_like_digest(const char *s)
{
	size_t n = 0;

	if (strncmp(s, "sha", 3) != 0)
		return 0;
	for (s += 3; s[n] >= '0' && s[n] <= '9'; n++)
		;
	return n > 0 && s[n] == ':';
}

/* Docker's rule: a first component holding '.' or ':', or "localhost", is a registry. */
static int registry_like_n(const char *s, size_t n)
{
	return memchr(s, '.', n) != NULL || memchr(s, ':', n) != NULL ||
	       (n == 9 && strncmp(s, "localhost", 9) == 0);
}

static int registry_like(const char *s)
{
	return registry_like_n(s, strlen(s));
}

static int is_hub(const char *reg)
{
	return strcmp(reg, SQ_DOCKER_HUB) == 0 || strcmp(reg, "docker.io") == 0 ||
	       strcmp(reg, "index.docker.io") == 0 || strcmp(reg, "registry.hub.docker.com") == 0;
}

void sq_imgref_free(struct sq_image_ref *ref)
{
	free(ref->path);
	free(ref->user);
	free(ref->registry);
	free(ref->repository);
	free(ref->tag);
	free(ref->digest);
	free(ref->canonical);
	memset(ref, 0, sizeof(*ref));
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* One reference being parsed: its text, as messages show it, and where its error goes. */
struct ref_ctx {
	const char *text;
	char show[SQ_SHOW_MAX];
	int dockerd;          /* dockerd://: a local image, no USER@ nor REGISTRY# */
	char *err;
	size_t errlen;
};

/* A registry reference's parts, split in place in its writable copy (NULL: not given). */
struct ref_parts {
	char *user, *registry, *image, *tag, *digest;
};

/* Characters no reference holds. '$' is checked once USER@ is split off: nvcr.io's user
 * is literally $oauthtoken. */
static int check_chars(const struct ref_ctx *c, const char *work)
{
	const char *p;

	for (p = work; *p; p++)
		if (*p == ' ' || strchr("\"'`\\;&|<>(){}*?!", *p) != NULL ||
		    (unsigned char)*p >= 0x7f)
			break;
	if (*p == '\0')
		return 0;
	return sq_errf(c->err, c->errlen, WHAT ": '%s': character '%c' cannot appear in an image "
		       "reference (use [USER@][REGISTRY#]IMAGE[:TAG] or a path starting with "
		       "'/' or '.')", c->show, (unsigned char)*p < 0x7f ? *p : '?');
}

/* @DIGEST after the last '@', then USER@ before the first; *work moves past USER@. */
static int split_user_digest(const struct ref_ctx *c, char **work, struct ref_parts *r)
{
	char *at = strrchr(*work, '@');

	if (at != NULL && looks_like_digest(at + 1)) {
		*at = '\0';
		r->digest = at + 1;
		if (check_digest(c->text, r->digest, c->err, c->errlen) != 0)
			return -1;
	}
	at = strchr(*work, '@');
	if (at == NULL)
		return 0;
	if (c->dockerd)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': dockerd:// images take no USER@ "
			       "(use dockerd://NAME[:TAG])", c->show);
	*at = '\0';
	r->user = *work;
	*work = at + 1;
	if (check_user(c->text, r->user, c->err, c->errlen) != 0)
		return -1;
	if (strchr(*work, '@') != NULL)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': more than one '@' (use "
			       "USER@REGISTRY#IMAGE[:TAG] or IMAGE@sha256:DIGEST)", c->show);
	return 0;
}

/* REGISTRY#IMAGE (Enroot's form), or REGISTRY/IMAGE when the first component is a
 * registry by Docker's rule; else all of work is the image. */
static int split_registry(const struct ref_ctx *c, char *work, struct ref_parts *r)
{
	char *hash = strchr(work, '#'), *slash;

	if (hash == NULL) {
		r->image = work;
		slash = strchr(work, '/');
		if (slash != NULL && registry_like_n(work, (size_t)(slash - work))) {
			*slash = '\0';
			r->registry = work;
			r->image = slash + 1;
		}
		return 0;
	}
	if (c->dockerd)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': dockerd:// images take no "
			       "REGISTRY# (use dockerd://NAME[:TAG])", c->show);
	if (strchr(hash + 1, '#') != NULL)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': more than one '#' (use "
			       "REGISTRY#IMAGE[:TAG])", c->show);
	*hash = '\0';
	r->registry = work;
	r->image = hash + 1;
	if (*r->registry == '\0')
		return sq_errf(c->err, c->errlen, WHAT ": '%s': empty registry before '#' (use "
			       "REGISTRY#IMAGE, e.g. nvcr.io#nvidia/pytorch:24.05-py3)", c->show);
	return 0;
}

/* :TAG after the image's last path component (a ':' before it is a registry's port). */
static int split_tag(const struct ref_ctx *c, struct ref_parts *r)
{
	char *slash = strrchr(r->image, '/');
	char *colon = strrchr(slash ? slash : r->image, ':');

	if (colon == NULL)
		return 0;
	*colon = '\0';
	r->tag = colon + 1;
	return check_tag(c->text, r->tag, c->err, c->errlen) != 0 ? -1 : 0;
}

/* The form every other step compares: [dockerd://]REGISTRY/REPOSITORY[:TAG][@DIGEST]. A
 * registry Docker's rule would not recognise (a bare host name given as HOST#) keeps
 * Enroot's '#', and one spelt like a transport (oci:5000) keeps docker://, so the
 * canonical form parses back to itself. */
static char *canonical_form(int dockerd, const struct sq_image_ref *out)
{
	struct sq_buf b;

	sq_buf_init(&b);
	if (dockerd)
		sq_buf_add(&b, "dockerd://");
	else if (out->registry != NULL && sq_imgref_has_transport(out->registry))
		sq_buf_add(&b, "docker://");
	if (out->registry != NULL)
		sq_buf_addf(&b, "%s%c", out->registry, registry_like(out->registry) ? '/' : '#');
	sq_buf_add(&b, out->repository ? out->repository : "");
	if (out->tag != NULL)
		sq_buf_addf(&b, ":%s", out->tag);
	if (out->digest != NULL)
		sq_buf_addf(&b, "@%s", out->digest);
	return sq_buf_take(&b);
}

/* out from the checked parts. hub: Docker Hub's, whose one-component names are
 * library/NAME; no tag and no digest is :latest. */
static int fill_ref(const struct ref_ctx *c, const struct ref_parts *r, int hub,
		    struct sq_image_ref *out)
{
	const char *tag = r->tag == NULL && r->digest == NULL ? "latest" : r->tag;
	struct sq_buf b;

	out->kind = c->dockerd ? SQ_IMAGE_DOCKERD : SQ_IMAGE_REGISTRY;
	out->user = dup_or_null(r->user);
	out->registry = hub ? strdup(SQ_DOCKER_HUB) : dup_or_null(r->registry);
	if (hub && strchr(r->image, '/') == NULL) {
		sq_buf_init(&b);
		sq_buf_addf(&b, "library/%s", r->image);
		out->repository = sq_buf_take(&b);
	} else {
		out->repository = strdup(r->image);
	}
	out->tag = dup_or_null(tag);
	out->digest = dup_or_null(r->digest);
	out->canonical = canonical_form(c->dockerd, out);
	if (out->repository == NULL || out->canonical == NULL || (r->user && !out->user) ||
	    (out->registry == NULL && (hub || r->registry)) || (tag && !out->tag) ||
	    (r->digest && !out->digest))
		return sq_errf(c->err, c->errlen, WHAT ": out of memory");
	return 0;
}

/* Registry or dockerd reference in `work` (a writable copy; split in place). */
static int parse_remote(const char *text, char *work, int dockerd, struct sq_image_ref *out,
			char *err, size_t errlen)
{
	struct ref_ctx c = { .text = text, .dockerd = dockerd, .err = err, .errlen = errlen };
	struct ref_parts r;
	int hub;

	memset(&r, 0, sizeof(r));
	sq_show(text, c.show, sizeof(c.show));
	if (*work == '\0')
		return sq_errf(err, errlen, WHAT ": '%s': empty image name (give e.g. ubuntu:24.04)",
			       c.show);
	if (check_chars(&c, work) != 0 || split_user_digest(&c, &work, &r) != 0)
		return -1;
	if (strchr(work, '$') != NULL)
		return sq_errf(err, errlen, WHAT ": '%s': character '$' cannot appear in an "
			       "image reference outside the user name", c.show);
	if (split_registry(&c, work, &r) != 0 || split_tag(&c, &r) != 0)
		return -1;
	if (r.registry != NULL && check_registry(text, r.registry, err, errlen) != 0)
		return -1;
	hub = !dockerd && (r.registry == NULL || is_hub(r.registry));
	if (check_repository(text, r.image, hub && strchr(r.image, '/') == NULL ? 8 : 0, err,
			     errlen) != 0)
		return -1;
	return fill_ref(&c, &r, hub, out);
}

/* A squashfs path: the text as given. */
static int parse_file(const char *text, struct sq_image_ref *out, char *err, size_t errlen)
{
	out->kind = SQ_IMAGE_FILE;
	out->path = strdup(text);
	out->canonical = strdup(text);
	if (out->path == NULL || out->canonical == NULL)
		return sq_errf(err, errlen, WHAT ": out of memory");
	return 0;
}

/* [docker://|dockerd://]REFERENCE; any other scheme is refused. */
static int parse_scheme(const char *text, struct sq_image_ref *out, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	const char *rest = text, *scheme;
	char *work;
	int dockerd = 0, rc;

	if (strncmp(text, "dockerd://", 10) == 0) {
		dockerd = 1;
		rest = text + 10;
	} else if (strncmp(text, "docker://", 9) == 0) {
		rest = text + 9;
	} else if ((scheme = strstr(text, "://")) != NULL) {
		return sq_errf(err, errlen, WHAT ": '%s': unsupported scheme '%.*s://' (use docker://, "
			       "dockerd://, or a squashfs path starting with '/' or '.')",
			       sq_show(text, show, sizeof(show)),
			       (int)((scheme - text) < 32 ? scheme - text : 32), text);
	}
	if (rest[0] == '/' || rest[0] == '.')
		return sq_errf(err, errlen, WHAT ": '%s': a path after the scheme (give a squashfs "
			       "path without docker://, or an image name after it)",
			       sq_show(text, show, sizeof(show)));
	work = strdup(rest);
	if (work == NULL)
		return sq_errf(err, errlen, WHAT ": out of memory");
	rc = parse_remote(text, work, dockerd, out, err, errlen);
	free(work);
	return rc;
}

/* Paths first, then the transports that name files (docker-archive:, oci-archive:, oci:,
 * before Docker's rule could read them as a registry host), then registry references. */
int sq_imgref_parse_as(const char *text, int flags, struct sq_image_ref *out, char *err,
		       size_t errlen)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (text == NULL)
		return sq_errf(err, errlen, WHAT ": no value (give a squashfs path or an image name)");
	if (sq_text_check(WHAT, text, PATH_MAX - 1, err, errlen) != 0)
		return -1;
	if (text[0] == '/' || text[0] == '.')
		rc = parse_file(text, out, err, errlen);
	else if ((rc = sq_imgref_archive(text, out, err, errlen)) == 1)
		rc = parse_scheme(text, out, err, errlen);
	else if (rc == 0 && !(flags & SQ_IMGREF_ARCHIVES))
		rc = sq_imgref_refuse_archive(text, out->kind, err, errlen);
	if (rc != 0)
		sq_imgref_free(out);
	return rc;
}

int sq_imgref_parse(const char *text, struct sq_image_ref *out, char *err, size_t errlen)
{
	return sq_imgref_parse_as(text, 0, out, err, errlen);
}
