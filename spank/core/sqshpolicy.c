/* sqshpolicy.c: see sqshpolicy.h. */
#include "sqshpolicy.h"

#include <stdio.h>
#include <string.h>

#define SQ_SQSHPOL_HEAD "squall-policy-sqsh 1\n"

/* The line at *text into line (NUL-terminated, no newline); *text moves past it. 1 when a
 * line was read, 0 at the end, -1 when it is too long. */
static int next_line(const char **text, char *line, size_t linelen)
{
	const char *s = *text, *nl;
	size_t n;

	if (*s == '\0')
		return 0;
	nl = strchr(s, '\n');
	n = nl != NULL ? (size_t)(nl - s) : strlen(s);
	*text = nl != NULL ? nl + 1 : s + n;
	if (n >= linelen)
		return -1;
	memcpy(line, s, n);
	line[n] = '\0';
	return 1;
}

/* The text after the header and the stamp line, or NULL when text is not a compiled
 * policy; stamp (when not NULL) gets the stamp. */
static const char *body(const char *text, char *stamp, size_t stamplen)
{
	char line[256];
	size_t hl = strlen(SQ_SQSHPOL_HEAD);

	if (text == NULL || strncmp(text, SQ_SQSHPOL_HEAD, hl) != 0)
		return NULL;
	text += hl;
	if (next_line(&text, line, sizeof(line)) != 1 || strncmp(line, "stamp ", 6) != 0 ||
	    line[6] == '\0')
		return NULL;
	if (stamp != NULL)
		snprintf(stamp, stamplen, "%s", line + 6);
	return text;
}

int sq_sqshpolicy_fresh(const char *text, const char *stamp)
{
	char got[256];

	return body(text, got, sizeof(got)) != NULL && strcmp(got, stamp) == 0;
}

/* "accept" ... as SQ_SQSHPOL_*, and the rest of the word's line in *rest; -1 unknown. */
static int verdict_of(const char *s, const char **rest)
{
	static const char *const words[] = { "accept", "reject", "signed" };

	for (int i = 0; i < 3; i++) {
		size_t n = strlen(words[i]);
		if (strncmp(s, words[i], n) == 0 && (s[n] == '\0' || s[n] == ' ')) {
			*rest = s[n] == ' ' ? s + n + 1 : s + n;
			return i;
		}
	}
	return -1;
}

/* Whether scope (absolute, normalized) is path or a directory above it. */
static int holds(const char *scope, const char *path)
{
	size_t n = strlen(scope);

	if (strcmp(scope, "/") == 0)
		return path[0] == '/';
	return strncmp(scope, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

struct found {
	int scope, scope_len, transport, dflt;
};

/* One line of the body into f (the longest holding scope so far). 0, -1 malformed. */
static int take(const char *line, const char *path, struct found *f,
		struct sq_sqshpolicy_verdict *v)
{
	const char *rest = "";
	int vd;

	if (strncmp(line, "scope ", 6) == 0) {
		vd = verdict_of(line + 6, &rest);
		if (vd < 0 || rest[0] != '/')
			return -1;
		if (holds(rest, path) && (int)strlen(rest) > f->scope_len) {
			f->scope = vd;
			f->scope_len = (int)strlen(rest);
			snprintf(v->scope, sizeof(v->scope), "%s", rest);
		}
		return 0;
	}
	if (strncmp(line, "transport ", 10) == 0)
		return (f->transport = verdict_of(line + 10, &rest)) < 0 || *rest ? -1 : 0;
	if (strncmp(line, "default ", 8) == 0)
		return (f->dflt = verdict_of(line + 8, &rest)) < 0 || *rest ? -1 : 0;
	return -1;
}

int sq_sqshpolicy_decide(const char *text, const char *path, struct sq_sqshpolicy_verdict *v)
{
	struct found f = { -1, -1, -1, -1 };
	char line[SQ_SQSHPOL_SCOPE_MAX + 32];
	const char *s = body(text, NULL, 0);
	int rc;

	memset(v, 0, sizeof(*v));
	if (s == NULL)
		return -1;
	while ((rc = next_line(&s, line, sizeof(line))) == 1)
		if (take(line, path, &f, v) < 0)
			return -1;
	if (rc < 0)
		return -1;
	if (f.scope >= 0) {
		v->verdict = f.scope;
		v->where = SQ_SQSHPOL_SCOPE;
	} else if (f.transport >= 0) {
		v->verdict = f.transport;
		v->where = SQ_SQSHPOL_TRANSPORT;
	} else if (f.dflt >= 0) {
		v->verdict = f.dflt;
		v->where = SQ_SQSHPOL_DEFAULT;
	} else {
		v->verdict = SQ_SQSHPOL_ACCEPT;
		v->where = SQ_SQSHPOL_UNJUDGED;
	}
	return 0;
}

int sq_sqshpolicy_refusal(const char *policy_file, const char *image,
			  const struct sq_sqshpolicy_verdict *v, char *out, size_t outlen)
{
	char label[SQ_SQSHPOL_SCOPE_MAX + 64];
	const char *why;
	int n;

	if (v->verdict == SQ_SQSHPOL_ACCEPT)
		return -1;
	if (v->where == SQ_SQSHPOL_SCOPE)
		snprintf(label, sizeof(label), "the scope \"%s\" of transport squall-sqsh",
			 v->scope);
	else if (v->where == SQ_SQSHPOL_TRANSPORT)
		snprintf(label, sizeof(label), "the squall-sqsh transport's default scope \"\"");
	else
		snprintf(label, sizeof(label), "the global default");
	why = v->verdict == SQ_SQSHPOL_REJECT
		? "rejects every image: run an image from a directory the site accepts, or ask "
		  "the site's administrators"
		: "requires a signature, and a .sqsh file carries no signature: ask the site's "
		  "administrators to accept its directory, or sign and push the image to a "
		  "registry";
	n = snprintf(out, outlen, "the site policy %s refuses %s: %s %s (docs/registries.md)",
		     policy_file, image, label, why);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}
