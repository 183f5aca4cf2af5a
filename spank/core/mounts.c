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

	if (klen == 0)
		return 0;
	for (k = 0; k < klen; k++)
		if (!((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= '0' && s[k] <= '9') || s[k] == '_'))
			return 0;
	if (eq == NULL)
		return 1;
	v = eq + 1;
	vlen = n - klen - 1;
	if (vlen == 0)
		return 0;
	if (klen == 4 && strncmp(s, "mode", 4) == 0) {
		for (k = 0; k < vlen && v[k] >= '0' && v[k] <= '7'; k++)
			;
		return k == vlen && vlen <= 4;
	}
	for (k = 0; k < sizeof(numeric) / sizeof(numeric[0]); k++)
		if (strlen(numeric[k].key) == klen && strncmp(s, numeric[k].key, klen) == 0)
			return number_ok(v, vlen, numeric[k].suffixes);
	for (k = 0; k < vlen; k++)
		if (!((v[k] >= 'a' && v[k] <= 'z') || (v[k] >= 'A' && v[k] <= 'Z') ||
		      (v[k] >= '0' && v[k] <= '9') || strchr("_.:%/-", v[k]) != NULL))
			return 0;
	return 1;
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

		if (starts && ends)
			return sq_errf(err, errlen, WHAT ": '%s': %s holds a '..' component (give the "
				       "path without '..')", sq_show(entry, eshow, sizeof(eshow)), role);
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

/* Build m->options from the '+'-joined flags (may be NULL). */
static int build_options(const char *entry, struct sq_mount *m, const char *flags,
			 char *err, size_t errlen)
{
	char eshow[SQ_SHOW_MAX], fshow[SQ_SHOW_MAX];
	const char *s, *e, *seen[64];
	const char *ro = NULL, *rw = NULL, *bind = NULL, *rbind = NULL, *prop = NULL;
	int suid = 0, dev = 0;
	size_t nseen = 0, i, n;
	struct sq_buf b, extra;

	sq_show(entry, eshow, sizeof(eshow));
	if (m->type == SQ_MOUNT_UMOUNT && flags != NULL)
		return sq_errf(err, errlen, WHAT ": '%s': umount takes no flags (use umount:DST)",
			       eshow);
	sq_buf_init(&extra);
	for (s = flags; s != NULL && *s; s = *e ? e + 1 : e) {
		e = strchr(s, '+');
		if (e == NULL)
			e = s + strlen(s);
		n = (size_t)(e - s);
		if (n == 0 || (*e == '+' && e[1] == '\0')) {
			sq_buf_release(&extra);
			return sq_errf(err, errlen, WHAT ": '%s': empty mount flag (join flags with "
				       "a single '+', e.g. ro+rprivate)", eshow);
		}
		if (!in_list(bind_flags, s, n) &&
		    !(m->type == SQ_MOUNT_TMPFS && tmpfs_option_ok(s, n))) {
			char word[64];

			snprintf(word, sizeof(word), "%.*s", (int)(n < 60 ? n : 60), s);
			sq_buf_release(&extra);
			return sq_errf(err, errlen, WHAT ": '%s': unknown mount flag '%s' (use ro, rw, "
				       "rbind, bind, rprivate, private, nosuid, nodev, noexec, ...%s)",
				       eshow, sq_show(word, fshow, sizeof(fshow)),
				       m->type == SQ_MOUNT_TMPFS ? ", and tmpfs options: size=, mode=, "
				       "huge=, ..." : "");
		}
		for (i = 0; i < nseen; i++)
			if (strlen(seen[i]) >= n && strncmp(seen[i], s, n) == 0 &&
			    (seen[i][n] == '+' || seen[i][n] == '\0'))
				break;
		if (i < nseen)
			continue;    /* the same flag twice: once is enough */
		if (nseen == sizeof(seen) / sizeof(seen[0])) {
			sq_buf_release(&extra);
			return sq_errf(err, errlen, WHAT ": '%s': too many mount flags (at most 64)",
				       eshow);
		}
		seen[nseen++] = s;
		if (n == 2 && strncmp(s, "ro", 2) == 0)
			ro = s;
		else if (n == 2 && strncmp(s, "rw", 2) == 0)
			rw = s;
		else if (n == 4 && strncmp(s, "bind", 4) == 0)
			bind = s;
		else if (n == 5 && strncmp(s, "rbind", 5) == 0)
			rbind = s;
		else if (n == 4 && strncmp(s, "suid", 4) == 0)
			suid = 1;
		else if (n == 3 && strncmp(s, "dev", 3) == 0)
			dev = 1;
		if (in_list(propagation_flags, s, n)) {
			if (prop != NULL) {
				sq_buf_release(&extra);
				return sq_errf(err, errlen, WHAT ": '%s': more than one propagation "
					       "flag (pick one of private, rprivate, slave, rslave, "
					       "shared, rshared, unbindable, runbindable)", eshow);
			}
			prop = s;
		}
		if (m->type == SQ_MOUNT_BIND && (s == bind || s == rbind))
			continue;    /* placed first below */
		if (m->type == SQ_MOUNT_TMPFS && (s == ro || s == rw))
			continue;
		sq_buf_addc(&extra, ',');
		sq_buf_addn(&extra, s, n);
	}
	if (ro && rw) {
		sq_buf_release(&extra);
		return sq_errf(err, errlen, WHAT ": '%s': both ro and rw given (keep one)", eshow);
	}
	if (bind && rbind) {
		sq_buf_release(&extra);
		return sq_errf(err, errlen, WHAT ": '%s': both bind and rbind given (keep one)", eshow);
	}
	if (m->type == SQ_MOUNT_TMPFS && (bind || rbind)) {
		sq_buf_release(&extra);
		return sq_errf(err, errlen, WHAT ": '%s': tmpfs takes no bind/rbind flag (use "
			       "tmpfs:DST[:FLAGS])", eshow);
	}
	sq_buf_init(&b);
	if (m->type == SQ_MOUNT_BIND) {
		sq_buf_add(&b, "x-create=auto,");
		sq_buf_add(&b, bind ? "bind" : "rbind");
	} else if (m->type == SQ_MOUNT_TMPFS) {
		/* Defaults a scratch tmpfs wants, unless the user said otherwise. */
		sq_buf_add(&b, "x-create=dir,");
		sq_buf_add(&b, ro ? "ro" : "rw");
		if (!suid)
			sq_buf_add(&b, ",nosuid");
		if (!dev)
			sq_buf_add(&b, ",nodev");
	} else {
		sq_buf_add(&b, "x-detach");
	}
	if (extra.data != NULL)
		sq_buf_add(&b, extra.data);
	sq_buf_release(&extra);
	m->options = sq_buf_take(&b);
	if (m->options == NULL)
		return sq_errf(err, errlen, WHAT ": out of memory");
	return 0;
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

/* Parse one ENTRY into m. */
static int parse_entry(const char *entry, const char *cwd, struct sq_mount *m,
		       char *err, size_t errlen)
{
	char eshow[SQ_SHOW_MAX], sshow[SQ_SHOW_MAX];
	const char *f[3] = { NULL, NULL, NULL };
	char *copy, *p;
	int nf = 0, rc = -1;
	struct sq_buf b;

	sq_show(entry, eshow, sizeof(eshow));
	copy = strdup(entry);
	if (copy == NULL)
		return sq_errf(err, errlen, WHAT ": out of memory");
	/* SRC:DST:FLAGS, split at the first two ':' as Pyxis does: a flag value may hold
	 * ':' (mpol=bind:0-3); a path cannot. */
	for (p = copy, f[nf++] = copy; *p && nf < 3; p++) {
		if (*p != ':')
			continue;
		*p = '\0';
		f[nf++] = p + 1;
	}
	if (*f[0] == '\0') {
		sq_errf(err, errlen, WHAT ": '%s': empty source (use SRC[:DST[:FLAGS]])", eshow);
		goto out;
	}
	if (nf >= 2 && *f[1] == '\0') {
		sq_errf(err, errlen, WHAT ": '%s': empty target (give DST after ':', starting with "
			"'/', or drop the ':')", eshow);
		goto out;
	}
	if (nf == 3 && *f[2] == '\0') {
		sq_errf(err, errlen, WHAT ": '%s': empty flags after the last ':' (give flags such "
			"as ro, or drop the ':')", eshow);
		goto out;
	}
	if (strcmp(f[0], "tmpfs") == 0) {
		m->type = SQ_MOUNT_TMPFS;
	} else if (strcmp(f[0], "umount") == 0) {
		m->type = SQ_MOUNT_UMOUNT;
	} else if (f[0][0] == '/' || f[0][0] == '.') {
		m->type = SQ_MOUNT_BIND;
	} else {
		sq_errf(err, errlen, WHAT ": '%s': source '%s' must be an absolute path, a path "
			"starting with '.', tmpfs or umount", eshow, sq_show(f[0], sshow, sizeof(sshow)));
		goto out;
	}
	if (nf == 1) {
		if (m->type != SQ_MOUNT_BIND) {
			sq_errf(err, errlen, WHAT ": '%s': %s needs a target (use %s:/DST)", eshow,
				f[0], f[0]);
			goto out;
		}
		f[1] = f[0];
	}
	if (f[1][0] != '/' && f[1][0] != '.') {
		sq_errf(err, errlen, WHAT ": '%s': target '%s' must start with '/' or '.'", eshow,
			sq_show(f[1], sshow, sizeof(sshow)));
		goto out;
	}
	if (m->type == SQ_MOUNT_BIND && path_check(entry, "source", f[0], err, errlen) != 0)
		goto out;
	if (path_check(entry, "target", f[1], err, errlen) != 0)
		goto out;
	if (m->type == SQ_MOUNT_BIND) {
		if (f[0][0] == '.' && cwd != NULL &&
		    (sq_text_check(WHAT ": working directory", cwd, PATH_MAX - 1, err, errlen) != 0 ||
		     path_check(entry, "working directory", cwd, err, errlen) != 0))
			goto out;
		m->source = normalise(f[0], cwd);
	} else {
		m->source = strdup(m->type == SQ_MOUNT_TMPFS ? "tmpfs" : "none");
	}
	m->target = normalise(f[1], "/");
	if (m->source == NULL || m->target == NULL) {
		sq_errf(err, errlen, WHAT ": out of memory");
		goto out;
	}
	if (strlen(m->source) >= PATH_MAX) {
		sq_errf(err, errlen, WHAT ": '%s': source is longer than %d bytes once made absolute "
			"(use a shorter path)", eshow, PATH_MAX - 1);
		goto out;
	}
	if (strcmp(m->target, "/") == 0) {
		sq_errf(err, errlen, WHAT ": '%s': target is the container's root (mount on a "
			"directory below '/')", eshow);
		goto out;
	}
	if (build_options(entry, m, nf == 3 ? f[2] : NULL, err, errlen) != 0)
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
