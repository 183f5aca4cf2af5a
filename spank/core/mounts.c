/* mounts.c: --container-mounts specs to Enroot fstab lines (no filesystem access). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mounts.h"
#include "quote.h"
#include "strbuf.h"

#define WHAT "--container-mounts"
#define SPEC_MAX 65536

/* Flags a bind mount accepts, as mount(8) and Enroot's fstab spell them. */
static const char *const bind_flags[] = {
	"ro", "rw", "bind", "rbind",
	"private", "rprivate", "slave", "rslave", "shared", "rshared",
	"unbindable", "runbindable",
	"nosuid", "suid", "nodev", "dev", "noexec", "exec",
	"noatime", "atime", "nodiratime", "diratime", "relatime", "norelatime",
	"strictatime", "nostrictatime", NULL
};

static const char *const propagation_flags[] = {
	"private", "rprivate", "slave", "rslave", "shared", "rshared",
	"unbindable", "runbindable", NULL
};

static int in_list(const char *const *list, const char *s, size_t n)
{
	for (; *list; list++)
		if (strlen(*list) == n && strncmp(*list, s, n) == 0)
			return 1;
	return 0;
}

/* N[suffix] with 1..18 digits and at most one suffix character from `suffixes`. */
static int number_ok(const char *v, size_t n, const char *suffixes)
{
	size_t k, digits;

	for (k = 0, digits = 0; k < n && v[k] >= '0' && v[k] <= '9'; k++, digits++)
		;
	if (digits == 0 || digits > 18)
		return 0;
	return k == n || (k + 1 == n && suffixes != NULL && strchr(suffixes, v[k]) != NULL);
}

/* A tmpfs option's NAME: lower-case letters, digits and '_'. */
static int tmpfs_name_ok(const char *s, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++)
		if (!((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= '0' && s[k] <= '9') || s[k] == '_'))
			return 0;
	return n > 0;
}

/* A tmpfs option's free-form VALUE: letters, digits and "_.:%/-". */
static int tmpfs_value_ok(const char *v, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++)
		if (!((v[k] >= 'a' && v[k] <= 'z') || (v[k] >= 'A' && v[k] <= 'Z') ||
		      (v[k] >= '0' && v[k] <= '9') || strchr("_.:%/-", v[k]) != NULL))
			return 0;
	return 1;
}

/* mode=: at most four octal digits. */
static int octal_ok(const char *v, size_t n)
{
	size_t k;

	for (k = 0; k < n && v[k] >= '0' && v[k] <= '7'; k++)
		;
	return k == n && n <= 4;
}

/*
 * tmpfs options, passed through to the kernel as Pyxis does: NAME or NAME=VALUE with NAME
 * lower-case letters, digits and '_' and VALUE letters, digits and "_.:%/-" (mpol=bind:0-3,
 * huge=within_size, ...). The common sizes, ids and mode are checked here for a clear error.
 */
static int tmpfs_option_ok(const char *s, size_t n)
{
	static const struct { const char *key; const char *suffixes; } numeric[] = {
		{ "size", "kKmMgGtTpPeE%" }, { "nr_blocks", "kKmMgGtTpPeE" },
		{ "nr_inodes", "kKmMgGtTpPeE" }, { "uid", NULL }, { "gid", NULL },
	};
	const char *eq = memchr(s, '=', n), *v;
	size_t klen = eq ? (size_t)(eq - s) : n, vlen, k;

	if (!tmpfs_name_ok(s, klen))
		return 0;
	if (eq == NULL)
		return 1;
	v = eq + 1;
	vlen = n - klen - 1;
	if (vlen == 0)
		return 0;
	if (klen == 4 && strncmp(s, "mode", 4) == 0)
		return octal_ok(v, vlen);
	for (k = 0; k < sizeof(numeric) / sizeof(numeric[0]); k++)
		if (strlen(numeric[k].key) == klen && strncmp(s, numeric[k].key, klen) == 0)
			return number_ok(v, vlen, numeric[k].suffixes);
	return tmpfs_value_ok(v, vlen);
}

/* Checks every path shares; `role` is "source" or "target". */
static int path_check(const char *entry, const char *role, const char *p, char *err, size_t errlen)
{
	char eshow[SQ_SHOW_MAX];
	const char *c;
	size_t len = strlen(p);

	if (len >= PATH_MAX)
		return sq_errf(err, errlen, WHAT ": '%s': %s is %zu bytes long, the limit is %d "
			       "(use a shorter path)", sq_show(entry, eshow, sizeof(eshow)), role, len,
			       PATH_MAX - 1);
	for (c = p; *c; c++) {
		/* A space is fine (written as \040 in the fstab line, as Enroot reads it). */
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return sq_errf(err, errlen, WHAT ": '%s': %s holds a tab or a control "
				       "character, which would break the fstab line (use another path)",
				       sq_show(entry, eshow, sizeof(eshow)), role);
		if (*c == '\\' || *c == '$')
			return sq_errf(err, errlen, WHAT ": '%s': %s holds '%c', which the runtime "
				       "would interpret (rename the path or mount a parent directory)",
				       sq_show(entry, eshow, sizeof(eshow)), role, *c);
	}
	for (c = p; (c = strstr(c, "..")) != NULL; c += 2) {
		int starts = c == p || c[-1] == '/';
		int ends = c[2] == '\0' || c[2] == '/';

		/* A target's: Enroot's own refusal says "Cross-device link", which Pyxis's users
		 * (and its test suite) grep for. */
		if (starts && ends)
			return sq_errf(err, errlen, WHAT ": '%s': %s holds a '..' component%s (give "
				       "the path without '..')", sq_show(entry, eshow, sizeof(eshow)),
				       role, strcmp(role, "target") == 0
				       ? ", which could lead out of the container's root (Enroot "
					 "refuses it: Cross-device link)" : "");
	}
	return 0;
}

/*
 * Lexical normalisation: drop empty and '.' components. prefix (cwd, or "/" for a
 * target) is put in front of a path starting with '.'; with prefix NULL such a path
 * keeps its leading "./".
 */
static char *normalise(const char *p, const char *prefix)
{
	struct sq_buf in, out;
	const char *s, *e;
	char *joined, *res;
	int relative;

	sq_buf_init(&in);
	if (p[0] == '.' && prefix != NULL) {
		sq_buf_add(&in, prefix);
		sq_buf_addc(&in, '/');
	}
	sq_buf_add(&in, p);
	joined = sq_buf_take(&in);
	if (joined == NULL)
		return NULL;
	relative = joined[0] != '/';
	sq_buf_init(&out);
	sq_buf_add(&out, relative ? "." : "");
	for (s = joined; *s; s = e) {
		while (*s == '/')
			s++;
		e = s;
		while (*e && *e != '/')
			e++;
		if (e == s || (e - s == 1 && *s == '.'))
			continue;
		sq_buf_addc(&out, '/');
		sq_buf_addn(&out, s, (size_t)(e - s));
	}
	if (out.len == 0)
		sq_buf_addc(&out, '/');
	free(joined);
	res = sq_buf_take(&out);
	return res;
}

static void mount_clear(struct sq_mount *m)
{
	free(m->source);
	free(m->target);
	free(m->options);
	free(m->fstab);
	memset(m, 0, sizeof(*m));
}

void sq_mounts_free(struct sq_mount_list *list)
{
	size_t i;

	for (i = 0; i < list->count; i++)
		mount_clear(&list->items[i]);
	free(list->items);
	list->items = NULL;
	list->count = 0;
}

/* One entry being parsed: its text, as messages show it, and where its error goes. */
struct entry_ctx {
	const char *entry;
	char show[SQ_SHOW_MAX];
	char *err;
	size_t errlen;
};

/* What the '+'-joined flags of one entry said, as build_options collects them. */
struct flag_set {
	const char *seen[64];   /* each distinct flag once, where it starts in the flags */
	size_t nseen;
	const char *ro, *rw, *bind, *rbind, *prop;
	int suid, dev;
	struct sq_buf extra;    /* ",FLAG" for each flag passed on as given */
};

static int flag_is(const char *s, size_t n, const char *word)
{
	return strlen(word) == n && strncmp(s, word, n) == 0;
}

/* The flag from s to e (the next '+' or the end): a bind flag, or a tmpfs option on a
 * tmpfs; never empty. */
static int flag_word_check(const struct entry_ctx *c, int type, const char *s, const char *e)
{
	char fshow[SQ_SHOW_MAX], word[64];
	size_t n = (size_t)(e - s);

	if (n == 0 || (*e == '+' && e[1] == '\0'))
		return sq_errf(c->err, c->errlen, WHAT ": '%s': empty mount flag (join flags with "
			       "a single '+', e.g. ro+rprivate)", c->show);
	if (in_list(bind_flags, s, n) || (type == SQ_MOUNT_TMPFS && tmpfs_option_ok(s, n)))
		return 0;
	snprintf(word, sizeof(word), "%.*s", (int)(n < 60 ? n : 60), s);
	return sq_errf(c->err, c->errlen, WHAT ": '%s': unknown mount flag '%s' (use ro, rw, "
		       "rbind, bind, rprivate, private, nosuid, nodev, noexec, ...%s)",
		       c->show, sq_show(word, fshow, sizeof(fshow)),
		       type == SQ_MOUNT_TMPFS ? ", and tmpfs options: size=, mode=, "
		       "huge=, ..." : "");
}

/* The same flag given before: once is enough. */
static int flag_seen(const struct flag_set *fs, const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < fs->nseen; i++)
		if (strlen(fs->seen[i]) >= n && strncmp(fs->seen[i], s, n) == 0 &&
		    (fs->seen[i][n] == '+' || fs->seen[i][n] == '\0'))
			return 1;
	return 0;
}

/* Record a new flag: what it sets, and the flags passed on as given (a bind mount's
 * bind/rbind and a tmpfs's ro/rw are placed first by options_string instead). */
static int flag_note(const struct entry_ctx *c, struct flag_set *fs, int type, const char *s,
		     size_t n)
{
	if (fs->nseen == sizeof(fs->seen) / sizeof(fs->seen[0]))
		return sq_errf(c->err, c->errlen, WHAT ": '%s': too many mount flags (at most 64)",
			       c->show);
	fs->seen[fs->nseen++] = s;
	if (flag_is(s, n, "ro"))
		fs->ro = s;
	else if (flag_is(s, n, "rw"))
		fs->rw = s;
	else if (flag_is(s, n, "bind"))
		fs->bind = s;
	else if (flag_is(s, n, "rbind"))
		fs->rbind = s;
	else if (flag_is(s, n, "suid"))
		fs->suid = 1;
	else if (flag_is(s, n, "dev"))
		fs->dev = 1;
	if (in_list(propagation_flags, s, n)) {
		if (fs->prop != NULL)
			return sq_errf(c->err, c->errlen, WHAT ": '%s': more than one propagation "
				       "flag (pick one of private, rprivate, slave, rslave, "
				       "shared, rshared, unbindable, runbindable)", c->show);
		fs->prop = s;
	}
	if (type == SQ_MOUNT_BIND && (s == fs->bind || s == fs->rbind))
		return 0;
	if (type == SQ_MOUNT_TMPFS && (s == fs->ro || s == fs->rw))
		return 0;
	sq_buf_addc(&fs->extra, ',');
	sq_buf_addn(&fs->extra, s, n);
	return 0;
}

static int flag_conflicts(const struct entry_ctx *c, const struct flag_set *fs, int type)
{
	if (fs->ro && fs->rw)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': both ro and rw given (keep one)",
			       c->show);
	if (fs->bind && fs->rbind)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': both bind and rbind given (keep "
			       "one)", c->show);
	if (type == SQ_MOUNT_TMPFS && (fs->bind || fs->rbind))
		return sq_errf(c->err, c->errlen, WHAT ": '%s': tmpfs takes no bind/rbind flag "
			       "(use tmpfs:DST[:FLAGS])", c->show);
	return 0;
}

/* The options field: what the mount type needs first, then the flags as given. */
static char *options_string(int type, const struct flag_set *fs)
{
	struct sq_buf b;

	sq_buf_init(&b);
	if (type == SQ_MOUNT_BIND) {
		sq_buf_add(&b, "x-create=auto,");
		sq_buf_add(&b, fs->bind ? "bind" : "rbind");
	} else if (type == SQ_MOUNT_TMPFS) {
		/* Defaults a scratch tmpfs wants, unless the user said otherwise. */
		sq_buf_add(&b, "x-create=dir,");
		sq_buf_add(&b, fs->ro ? "ro" : "rw");
		if (!fs->suid)
			sq_buf_add(&b, ",nosuid");
		if (!fs->dev)
			sq_buf_add(&b, ",nodev");
	} else {
		sq_buf_add(&b, "x-detach");
	}
	if (fs->extra.data != NULL)
		sq_buf_add(&b, fs->extra.data);
	return sq_buf_take(&b);
}

/* Build m->options from the '+'-joined flags (may be NULL). */
static int build_options(const struct entry_ctx *c, struct sq_mount *m, const char *flags)
{
	struct flag_set fs;
	const char *s, *e;
	int rc = 0;

	if (m->type == SQ_MOUNT_UMOUNT && flags != NULL)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': umount takes no flags (use "
			       "umount:DST)", c->show);
	memset(&fs, 0, sizeof(fs));
	sq_buf_init(&fs.extra);
	for (s = flags; rc == 0 && s != NULL && *s; s = *e ? e + 1 : e) {
		e = strchr(s, '+');
		if (e == NULL)
			e = s + strlen(s);
		rc = flag_word_check(c, m->type, s, e);
		if (rc == 0 && !flag_seen(&fs, s, (size_t)(e - s)))
			rc = flag_note(c, &fs, m->type, s, (size_t)(e - s));
	}
	if (rc == 0)
		rc = flag_conflicts(c, &fs, m->type);
	if (rc == 0) {
		m->options = options_string(m->type, &fs);
		if (m->options == NULL)
			rc = sq_errf(c->err, c->errlen, WHAT ": out of memory");
	}
	sq_buf_release(&fs.extra);
	return rc;
}

/* An fstab field: spaces written as \040 (getmntent's escape, which Enroot reads). */
static void add_fstab_field(struct sq_buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == ' ')
			sq_buf_add(b, "\\040");
		else
			sq_buf_addc(b, *s);
	}
}

/* SRC:DST:FLAGS, split in place at the first two ':' as Pyxis does: a flag value may hold
 * ':' (mpol=bind:0-3); a path cannot. Returns how many fields there are. */
static int split_fields(char *copy, const char *f[3])
{
	char *p;
	int nf = 0;

	for (p = copy, f[nf++] = copy; *p && nf < 3; p++) {
		if (*p != ':')
			continue;
		*p = '\0';
		f[nf++] = p + 1;
	}
	return nf;
}

/* No field empty; m->type from the source; a bind mount given alone mounts at its own
 * path (f[1] = f[0]); the target starts with '/' or '.'. */
static int check_fields(const struct entry_ctx *c, const char *f[3], int nf, struct sq_mount *m)
{
	char sshow[SQ_SHOW_MAX];

	if (*f[0] == '\0')
		return sq_errf(c->err, c->errlen, WHAT ": '%s': empty source (use "
			       "SRC[:DST[:FLAGS]])", c->show);
	if (nf >= 2 && *f[1] == '\0')
		return sq_errf(c->err, c->errlen, WHAT ": '%s': empty target (give DST after ':', "
			       "starting with '/', or drop the ':')", c->show);
	if (nf == 3 && *f[2] == '\0')
		return sq_errf(c->err, c->errlen, WHAT ": '%s': empty flags after the last ':' "
			       "(give flags such as ro, or drop the ':')", c->show);
	if (strcmp(f[0], "tmpfs") == 0)
		m->type = SQ_MOUNT_TMPFS;
	else if (strcmp(f[0], "umount") == 0)
		m->type = SQ_MOUNT_UMOUNT;
	else if (f[0][0] == '/' || f[0][0] == '.')
		m->type = SQ_MOUNT_BIND;
	else
		return sq_errf(c->err, c->errlen, WHAT ": '%s': source '%s' must be an absolute "
			       "path, a path starting with '.', tmpfs or umount", c->show,
			       sq_show(f[0], sshow, sizeof(sshow)));
	if (nf == 1) {
		if (m->type != SQ_MOUNT_BIND)
			return sq_errf(c->err, c->errlen, WHAT ": '%s': %s needs a target (use "
				       "%s:/DST)", c->show, f[0], f[0]);
		f[1] = f[0];
	}
	if (f[1][0] != '/' && f[1][0] != '.')
		return sq_errf(c->err, c->errlen, WHAT ": '%s': target '%s' must start with '/' or "
			       "'.'", c->show, sq_show(f[1], sshow, sizeof(sshow)));
	return 0;
}

/* m->source and m->target from the checked fields: normalised, a relative source made
 * absolute from cwd (when given), never the container's root as the target. */
static int resolve_paths(const struct entry_ctx *c, const char *const f[3], const char *cwd,
			 struct sq_mount *m)
{
	if (m->type == SQ_MOUNT_BIND && path_check(c->entry, "source", f[0], c->err,
						   c->errlen) != 0)
		return -1;
	if (path_check(c->entry, "target", f[1], c->err, c->errlen) != 0)
		return -1;
	if (m->type == SQ_MOUNT_BIND) {
		if (f[0][0] == '.' && cwd != NULL &&
		    (sq_text_check(WHAT ": working directory", cwd, PATH_MAX - 1, c->err,
				   c->errlen) != 0 ||
		     path_check(c->entry, "working directory", cwd, c->err, c->errlen) != 0))
			return -1;
		m->source = normalise(f[0], cwd);
	} else {
		m->source = strdup(m->type == SQ_MOUNT_TMPFS ? "tmpfs" : "none");
	}
	m->target = normalise(f[1], "/");
	if (m->source == NULL || m->target == NULL)
		return sq_errf(c->err, c->errlen, WHAT ": out of memory");
	if (strlen(m->source) >= PATH_MAX)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': source is longer than %d bytes once "
			       "made absolute (use a shorter path)", c->show, PATH_MAX - 1);
	if (strcmp(m->target, "/") == 0)
		return sq_errf(c->err, c->errlen, WHAT ": '%s': target is the container's root "
			       "(mount on a directory below '/')", c->show);
	return 0;
}

/* Parse one ENTRY into m. */
static int parse_entry(const char *entry, const char *cwd, struct sq_mount *m,
		       char *err, size_t errlen)
{
	struct entry_ctx c = { .entry = entry, .err = err, .errlen = errlen };
	const char *f[3] = { "", "", "" };   /* the fields given; check_fields reads nf */
	char *copy;
	int nf, rc = -1;
	struct sq_buf b;

	sq_show(entry, c.show, sizeof(c.show));
	copy = strdup(entry);
	if (copy == NULL)
		return sq_errf(err, errlen, WHAT ": out of memory");
	nf = split_fields(copy, f);
	if (check_fields(&c, f, nf, m) != 0 || resolve_paths(&c, f, cwd, m) != 0 ||
	    build_options(&c, m, nf == 3 ? f[2] : NULL) != 0)
		goto out;
	sq_buf_init(&b);
	add_fstab_field(&b, m->source);
	sq_buf_addc(&b, ' ');
	add_fstab_field(&b, m->target);
	sq_buf_addf(&b, " %s %s", m->type == SQ_MOUNT_TMPFS ? "tmpfs" : "none", m->options);
	m->fstab = sq_buf_take(&b);
	if (m->fstab == NULL) {
		sq_errf(err, errlen, WHAT ": out of memory");
		goto out;
	}
	rc = 0;
out:
	free(copy);
	if (rc != 0)
		mount_clear(m);
	return rc;
}

int sq_mounts_parse(const char *spec, const char *cwd, struct sq_mount_list *out,
		    char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], tshow[SQ_SHOW_MAX];
	const char *s, *e;
	size_t i, n, cap = 0;
	struct sq_mount m;
	char *entry;

	out->items = NULL;
	out->count = 0;
	if (spec == NULL)
		return sq_errf(err, errlen, WHAT ": no value (use SRC[:DST[:FLAGS]][,...])");
	if (sq_text_check(WHAT, spec, SPEC_MAX, err, errlen) != 0)
		return -1;
	for (s = spec; ; s = e + 1) {
		e = strchr(s, ',');
		n = e ? (size_t)(e - s) : strlen(s);
		if (n == 0) {
			sq_mounts_free(out);
			return sq_errf(err, errlen, WHAT ": '%s': empty entry (remove the extra ',')",
				       sq_show(spec, show, sizeof(show)));
		}
		entry = sq_strndup(s, n);
		if (entry == NULL) {
			sq_mounts_free(out);
			return sq_errf(err, errlen, WHAT ": out of memory");
		}
		memset(&m, 0, sizeof(m));
		if (parse_entry(entry, cwd, &m, err, errlen) != 0) {
			free(entry);
			sq_mounts_free(out);
			return -1;
		}
		for (i = 0; i < out->count; i++)
			if (strcmp(out->items[i].target, m.target) == 0)
				break;
		if (i < out->count) {
			struct sq_mount *o = &out->items[i];
			int same = o->type == m.type && strcmp(o->source, m.source) == 0 &&
				   strcmp(o->options, m.options) == 0;

			mount_clear(&m);
			if (!same) {
				sq_errf(err, errlen, WHAT ": '%s': target '%s' is already mounted by an "
					"earlier entry with another source or flags (give each target "
					"once)", sq_show(entry, show, sizeof(show)),
					sq_show(o->target, tshow, sizeof(tshow)));
				free(entry);
				sq_mounts_free(out);
				return -1;
			}
		} else {
			if (out->count == cap) {
				size_t ncap = cap ? cap * 2 : 8;
				struct sq_mount *items = realloc(out->items, ncap * sizeof(*items));

				if (items == NULL) {
					mount_clear(&m);
					free(entry);
					sq_mounts_free(out);
					return sq_errf(err, errlen, WHAT ": out of memory");
				}
				out->items = items;
				cap = ncap;
			}
			out->items[out->count++] = m;
		}
		free(entry);
		if (e == NULL)
			break;
	}
	return 0;
}
