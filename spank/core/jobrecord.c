/* jobrecord.c: see jobrecord.h. */
#include "jobrecord.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define SQ_DIGEST_HEX 64

/* Append s to out at *at, ' ' and '%' percent-encoded. 0 ok, -1 no room. */
static int put_encoded(char *out, size_t outlen, size_t *at, const char *s)
{
	for (; *s != '\0'; s++) {
		const char *piece = *s == ' ' ? "%20" : *s == '%' ? "%25" : NULL;
		char one[2] = { *s, '\0' };
		size_t n;

		if (piece == NULL)
			piece = one;
		n = strlen(piece);
		if (*at + n >= outlen)
			return -1;
		memcpy(out + *at, piece, n + 1);
		*at += n;
	}
	return 0;
}

static int put_text(char *out, size_t outlen, size_t *at, const char *s)
{
	size_t n = strlen(s);

	if (*at + n >= outlen)
		return -1;
	memcpy(out + *at, s, n + 1);
	*at += n;
	return 0;
}

static int is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strchr("0123456789abcdef", s[i]) == NULL || s[i] == '\0')
			return 0;
	return 1;
}

/* The 64 hex digits of a cache entry's name (sha256-HEX.sqsh, sha256-HEX-VARIANT.sqsh),
 * or NULL. */
static const char *entry_digest(const char *path)
{
	const char *base = strrchr(path, '/');
	const char *hex;
	char after;

	base = base != NULL ? base + 1 : path;
	if (strncmp(base, "sha256-", 7) != 0)
		return NULL;
	hex = base + 7;
	if (strlen(hex) < SQ_DIGEST_HEX || !is_hex(hex, SQ_DIGEST_HEX))
		return NULL;
	after = hex[SQ_DIGEST_HEX];
	if (after == '-' || strcmp(hex + SQ_DIGEST_HEX, ".sqsh") == 0)
		return hex;
	return NULL;
}

static int registry_entry(const char *ref, const char *path, char *out, size_t outlen,
			  size_t *at)
{
	const char *hex = entry_digest(path);
	char digest[8 + SQ_DIGEST_HEX + 1];

	if (put_encoded(out, outlen, at, ref) < 0)
		return -1;
	if (hex == NULL || strstr(ref, "@sha256:") != NULL)
		return 0;
	snprintf(digest, sizeof(digest), "@sha256:%.*s", SQ_DIGEST_HEX, hex);
	return put_text(out, outlen, at, digest);
}

static int file_entry(const char *path, long long size, long long mtime, char *out,
		      size_t outlen, size_t *at)
{
	char tail[96], when[32];
	time_t t = (time_t)mtime;
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL || strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ",
						     &tm) == 0)
		return -1;
	snprintf(tail, sizeof(tail), "@size=%lld,mtime=%s", size, when);
	if (put_encoded(out, outlen, at, path) < 0)
		return -1;
	return put_text(out, outlen, at, tail);
}

int sq_jobrecord_entry(const char *ref, const char *path, int from_registry, long long size,
		       long long mtime, char *out, size_t outlen)
{
	size_t at = 0;
	int rc;

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	rc = put_text(out, outlen, &at, "squall-image=");
	if (rc == 0)
		rc = from_registry ? registry_entry(ref, path, out, outlen, &at)
				   : file_entry(path, size, mtime, out, outlen, &at);
	if (rc < 0)
		out[0] = '\0';
	return rc;
}
