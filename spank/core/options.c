/* options.c: the container flag table and the precedence rules between sources. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "env.h"
#include "imageref.h"
#include "mounts.h"
#include "options.h"
#include "quote.h"
#include "strbuf.h"
#include "unshare.h"

#define NAME_MAX_LEN 128

static const struct sq_flag flags[SQ_OPT_COUNT] = {
	{ SQ_OPT_IMAGE, "container-image", 1, "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
	  "[squall] image to run the step in: a squashfs path, or a registry image" },
	{ SQ_OPT_MOUNTS, "container-mounts", 1, "SRC:DST[:FLAGS][,SRC:DST...]",
	  "[squall] bind mounts into the container; flags joined by '+', e.g. ro+rprivate" },
	{ SQ_OPT_WORKDIR, "container-workdir", 1, "PATH",
	  "[squall] working directory inside the container" },
	{ SQ_OPT_NAME, "container-name", 1, "NAME[:auto|create|exec|no_exec]",
	  "[squall] keep the container under NAME and reuse it in later steps" },
	{ SQ_OPT_SAVE, "container-save", 1, "PATH",
	  "[squall] save the container to a squashfs file at the end of the step" },
	{ SQ_OPT_MOUNT_HOME, "container-mount-home", 0, NULL,
	  "[squall] bind the user's home directory into the container" },
	{ SQ_OPT_NO_MOUNT_HOME, "no-container-mount-home", 0, NULL,
	  "[squall] do not bind the user's home directory" },
	{ SQ_OPT_REMAP_ROOT, "container-remap-root", 0, NULL,
	  "[squall] appear as root inside the container" },
	{ SQ_OPT_NO_REMAP_ROOT, "no-container-remap-root", 0, NULL,
	  "[squall] keep the user's own uid inside the container" },
	{ SQ_OPT_ENTRYPOINT, "container-entrypoint", 0, NULL,
	  "[squall] run the image's entrypoint before the command" },
	{ SQ_OPT_NO_ENTRYPOINT, "no-container-entrypoint", 0, NULL,
	  "[squall] do not run the image's entrypoint" },
	{ SQ_OPT_ENTRYPOINT_LOG, "container-entrypoint-log", 0, NULL,
	  "[squall] show the entrypoint's output" },
	{ SQ_OPT_WRITABLE, "container-writable", 0, NULL,
	  "[squall] make the container's root filesystem writable" },
	{ SQ_OPT_READONLY, "container-readonly", 0, NULL,
	  "[squall] make the container's root filesystem read-only" },
	{ SQ_OPT_ENV, "container-env", 1, "NAME[,NAME...]",
	  "[squall] these variables keep the host's value over the image's" },
	{ SQ_OPT_EFA, "container-efa", 1, "auto|require|off",
	  "[squall] EFA networking in the container: auto, require (fail without it) or off" },
	{ SQ_OPT_NCCL_DEBUG, "container-nccl-debug", 2, "VERSION|WARN|INFO|TRACE",
	  "[squall] set NCCL_DEBUG (default INFO) to check which network NCCL picks" },
	{ SQ_OPT_LOG, "container-log", 1, "quiet|verbose",
	  "[squall] verbose: print per-phase timings (image, start, join)" },
	{ SQ_OPT_UNSHARE, "container-unshare", 1, "NS[,NS...]",
	  "[squall] new namespaces for the container: net, ipc, uts (comma-separated)" },
	{ SQ_OPT_REUSE, "container-reuse", 0, NULL,
	  "[squall] later steps of the job reuse this node's container (a fresh layer each)" },
	{ SQ_OPT_NO_REUSE, "no-container-reuse", 0, NULL,
	  "[squall] start a container for this step alone" },
	{ SQ_OPT_PRESTART, "container-prestart", 1, "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
	  "[squall] sbatch/salloc: start IMAGE's container on every node at allocation, for "
	  "the job's first srun --container-image=IMAGE to join (PrologFlags=Alloc)" },
};

size_t sq_opt_flag_count(void)
{
	return SQ_OPT_COUNT;
}

const struct sq_flag *sq_opt_flag(size_t i)
{
	return i < SQ_OPT_COUNT ? &flags[i] : NULL;
}

int sq_opt_lookup(const char *name)
{
	size_t i;

	if (name == NULL)
		return -1;
	if (strncmp(name, "--", 2) == 0)
		name += 2;
	for (i = 0; i < SQ_OPT_COUNT; i++)
		if (strcmp(flags[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* The setting a flag writes: paired flags share their positive flag's slot. */
static int slot_of(int id)
{
	switch (id) {
	case SQ_OPT_NO_MOUNT_HOME:
		return SQ_OPT_MOUNT_HOME;
	case SQ_OPT_NO_REMAP_ROOT:
		return SQ_OPT_REMAP_ROOT;
	case SQ_OPT_NO_ENTRYPOINT:
		return SQ_OPT_ENTRYPOINT;
	case SQ_OPT_READONLY:
		return SQ_OPT_WRITABLE;
	case SQ_OPT_NO_REUSE:
		return SQ_OPT_REUSE;
	default:
		return id;
	}
}

/* The other flag of a pair, by the positive flag's id; -1 when there is none. */
static int opposite(int slot)
{
	switch (slot) {
	case SQ_OPT_MOUNT_HOME:
		return SQ_OPT_NO_MOUNT_HOME;
	case SQ_OPT_REMAP_ROOT:
		return SQ_OPT_NO_REMAP_ROOT;
	case SQ_OPT_ENTRYPOINT:
		return SQ_OPT_NO_ENTRYPOINT;
	case SQ_OPT_WRITABLE:
		return SQ_OPT_READONLY;
	case SQ_OPT_REUSE:
		return SQ_OPT_NO_REUSE;
	default:
		return -1;
	}
}

static int is_negative(int id)
{
	return id == SQ_OPT_NO_MOUNT_HOME || id == SQ_OPT_NO_REMAP_ROOT ||
	       id == SQ_OPT_NO_ENTRYPOINT || id == SQ_OPT_READONLY || id == SQ_OPT_NO_REUSE;
}

int sq_opt_env_name(int id, const char *prefix, char *buf, size_t buflen)
{
	const char *name, *rest;
	size_t i, n;
	int neg;

	if (id < 0 || id >= SQ_OPT_COUNT || prefix == NULL || buf == NULL)
		return -1;
	name = flags[id].name;
	neg = strncmp(name, "no-", 3) == 0;
	rest = name + (neg ? 3 : 0) + strlen("container-");
	n = (size_t)snprintf(buf, buflen, "%sCONTAINER_%s%s", prefix, neg ? "NO_" : "", rest);
	if (n >= buflen)
		return -1;
	for (i = strlen(prefix); buf[i]; i++)
		buf[i] = buf[i] == '-' ? '_' : (char)toupper((unsigned char)buf[i]);
	return 0;
}

void sq_opts_init(struct sq_opts *o)
{
	int i;

	memset(o, 0, sizeof(*o));
	o->name_mode = SQ_NAME_AUTO;
	o->mount_home = o->remap_root = o->entrypoint = -1;
	o->entrypoint_log = o->writable = o->reuse = -1;
	o->efa = SQ_EFA_SETTING_UNSET;
	o->log = SQ_LOG_UNSET;
	for (i = 0; i < SQ_OPT_COUNT; i++) {
		o->source[i] = SQ_SRC_NONE;
		o->given[i] = NULL;
	}
}

void sq_opts_free(struct sq_opts *o)
{
	int i;

	free(o->image);
	free(o->mounts);
	free(o->workdir);
	free(o->name);
	free(o->save);
	free(o->env);
	free(o->nccl_debug);
	free(o->prestart);
	for (i = 0; i < SQ_OPT_COUNT; i++)
		free(o->given[i]);
	sq_opts_init(o);
}

static const char *const name_modes[] = { "auto", "create", "exec", "no_exec" };

const char *sq_name_mode_str(int mode)
{
	return mode >= 0 && mode < 4 ? name_modes[mode] : "?";
}

int sq_opt_parse_name(const char *text, char **name, int *mode, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	const char *colon, *p;
	size_t n;
	int m;

	*name = NULL;
	*mode = SQ_NAME_AUTO;
	if (text == NULL)
		return sq_errf(err, errlen, "--container-name: no value (use NAME[:FLAG])");
	if (sq_text_check("--container-name", text, 4096, err, errlen) != 0)
		return -1;
	sq_show(text, show, sizeof(show));
	colon = strchr(text, ':');
	n = colon ? (size_t)(colon - text) : strlen(text);
	if (n == 0)
		return sq_errf(err, errlen, "--container-name: '%s': empty name (use NAME[:FLAG])",
			       show);
	if (n > NAME_MAX_LEN)
		return sq_errf(err, errlen, "--container-name: name is %zu bytes long, the limit is "
			       "%d (use a shorter name)", n, NAME_MAX_LEN);
	if (!isalnum((unsigned char)text[0]))
		return sq_errf(err, errlen, "--container-name: '%s': name must start with a letter "
			       "or digit", show);
	for (p = text; p < text + n; p++)
		if (!isalnum((unsigned char)*p) && strchr("_.+-", *p) == NULL)
			return sq_errf(err, errlen, "--container-name: '%s': name may only hold "
				       "letters, digits and '_', '.', '+', '-'", show);
	if (colon != NULL) {
		for (m = 0; m < 4; m++)
			if (strcmp(colon + 1, name_modes[m]) == 0)
				break;
		if (m == 4)
			return sq_errf(err, errlen, "--container-name: '%s': unknown flag '%s' (use "
				       "auto, create, exec or no_exec)", show,
				       colon[1] ? colon + 1 : "");
		*mode = m;
	}
	*name = sq_strndup(text, n);
	if (*name == NULL)
		return sq_errf(err, errlen, "--container-name: out of memory");
	return 0;
}

int sq_efa_setting_parse(const char *what, const char *value, int *out, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];

	if (value != NULL && strcmp(value, "auto") == 0)
		*out = SQ_EFA_SETTING_AUTO;
	else if (value != NULL && strcmp(value, "require") == 0)
		*out = SQ_EFA_SETTING_REQUIRE;
	else if (value != NULL && strcmp(value, "off") == 0)
		*out = SQ_EFA_SETTING_OFF;
	else
		return sq_errf(err, errlen, "%s: '%s' is not an EFA mode (use auto, require or off)",
			       what, sq_show(value ? value : "", show, sizeof(show)));
	return 0;
}

int sq_log_setting_parse(const char *what, const char *value, int *out, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];

	if (value != NULL && strcmp(value, "quiet") == 0)
		*out = SQ_LOG_QUIET;
	else if (value != NULL && strcmp(value, "verbose") == 0)
		*out = SQ_LOG_VERBOSE;
	else
		return sq_errf(err, errlen, "%s: '%s' is not a log level (use quiet or verbose)",
			       what, sq_show(value ? value : "", show, sizeof(show)));
	return 0;
}

const char *sq_efa_setting_str(int setting)
{
	static const char *const s[] = { "unset", "auto", "require", "off" };

	return setting >= 0 && setting < 4 ? s[setting] : "?";
}

const char *sq_log_setting_str(int setting)
{
	static const char *const s[] = { "unset", "quiet", "verbose" };

	return setting >= 0 && setting < 3 ? s[setting] : "?";
}

static const char *nccl_level(const char *v)
{
	static const char *const levels[] = { "VERSION", "WARN", "INFO", "TRACE" };
	size_t i;

	for (i = 0; i < 4; i++)
		if (strcasecmp(v, levels[i]) == 0)
			return levels[i];
	return NULL;
}

/* The parsed value of one flag, before it is stored. */
struct parsed {
	char *str;      /* heap: the string to store (image, mounts, ...) */
	char *norm;     /* heap: what "the same value" compares */
	int ival;       /* tri-state or enum */
};

/* One value being parsed: its flag as messages name it, and where its error goes. */
struct value_ctx {
	char what[64];
	char *err;
	size_t errlen;
};

/* A flag's check of its value: -1 refused (error written); 0 store *value as given (the
 * check may point it at its canonical spelling); 1 the check filled p itself. */
typedef int (*value_check)(const struct value_ctx *c, const char **value, struct parsed *p);

static int check_image(const struct value_ctx *c, const char **value, struct parsed *p)
{
	static const char image_flag[] = "--container-image";
	struct sq_image_ref ref;

	(void)p;
	if (sq_imgref_parse(*value, &ref, c->err, c->errlen) != 0) {
		/* The parser names --container-image; --container-prestart's error names it. */
		if (strcmp(c->what, image_flag) != 0 &&
		    strncmp(c->err, image_flag, sizeof(image_flag) - 1) == 0) {
			char rest[SQ_ERR_LEN];

			snprintf(rest, sizeof(rest), "%s", c->err + sizeof(image_flag) - 1);
			snprintf(c->err, c->errlen, "%s%s", c->what, rest);
		}
		return -1;
	}
	sq_imgref_free(&ref);
	return 0;
}

static int check_mounts(const struct value_ctx *c, const char **value, struct parsed *p)
{
	struct sq_mount_list ml;

	(void)p;
	if (sq_mounts_parse(*value, NULL, &ml, c->err, c->errlen) != 0)
		return -1;
	sq_mounts_free(&ml);
	return 0;
}

/* Relative: from the container's working directory (the image's WORKDIR). */
static int check_workdir(const struct value_ctx *c, const char **value, struct parsed *p)
{
	(void)p;
	return sq_text_check(c->what, *value, PATH_MAX - 1, c->err, c->errlen) != 0 ? -1 : 0;
}

/* NAME[:MODE]: the name stored, NAME:MODE compared (":auto" given or not is the same). */
static int check_name(const struct value_ctx *c, const char **value, struct parsed *p)
{
	size_t n;

	if (sq_opt_parse_name(*value, &p->str, &p->ival, c->err, c->errlen) != 0)
		return -1;
	n = strlen(p->str) + 16;
	p->norm = malloc(n);
	if (p->norm != NULL)
		snprintf(p->norm, n, "%s:%s", p->str, sq_name_mode_str(p->ival));
	return p->norm ? 1 : sq_errf(c->err, c->errlen, "%s: out of memory", c->what);
}

static int check_save(const struct value_ctx *c, const char **value, struct parsed *p)
{
	char show[SQ_SHOW_MAX];

	(void)p;
	if (sq_text_check(c->what, *value, PATH_MAX - 1, c->err, c->errlen) != 0)
		return -1;
	if ((*value)[strlen(*value) - 1] == '/')
		return sq_errf(c->err, c->errlen, "%s: '%s' names a directory (give a file path, "
			       "e.g. /fsx/images/saved.sqsh)", c->what,
			       sq_show(*value, show, sizeof(show)));
	return 0;
}

static int check_env(const struct value_ctx *c, const char **value, struct parsed *p)
{
	(void)p;
	return sq_env_check_names(*value, c->err, c->errlen) != 0 ? -1 : 0;
}

static int check_efa(const struct value_ctx *c, const char **value, struct parsed *p)
{
	return sq_efa_setting_parse(c->what, *value, &p->ival, c->err, c->errlen) != 0 ? -1 : 0;
}

/* The level in upper case; no value (or an empty one) is INFO. */
static int check_nccl_debug(const struct value_ctx *c, const char **value, struct parsed *p)
{
	char show[SQ_SHOW_MAX];
	const char *lvl = *value == NULL || **value == '\0' ? "INFO" : nccl_level(*value);

	(void)p;
	if (lvl == NULL)
		return sq_errf(c->err, c->errlen, "%s: '%s' is not an NCCL_DEBUG level (use "
			       "VERSION, WARN, INFO or TRACE)", c->what,
			       sq_show(*value, show, sizeof(show)));
	*value = lvl;
	return 0;
}

static int check_log(const struct value_ctx *c, const char **value, struct parsed *p)
{
	return sq_log_setting_parse(c->what, *value, &p->ival, c->err, c->errlen) != 0 ? -1 : 0;
}

/* NS[,NS...]: stored as given, compared in canonical order. */
static int check_unshare(const struct value_ctx *c, const char **value, struct parsed *p)
{
	char canon[32];

	if (sq_unshare_parse(*value, &p->ival, c->err, c->errlen) != 0)
		return -1;
	p->str = strdup(*value);
	p->norm = strdup(sq_unshare_str(p->ival, canon, sizeof(canon)));
	if (p->str == NULL || p->norm == NULL) {
		free(p->str);
		free(p->norm);
		return sq_errf(c->err, c->errlen, "%s: out of memory", c->what);
	}
	return 1;
}

/* The check of each flag that takes a value (the others are booleans). */
static const value_check value_checks[SQ_OPT_COUNT] = {
	[SQ_OPT_IMAGE] = check_image,
	[SQ_OPT_PRESTART] = check_image,
	[SQ_OPT_MOUNTS] = check_mounts,
	[SQ_OPT_WORKDIR] = check_workdir,
	[SQ_OPT_NAME] = check_name,
	[SQ_OPT_SAVE] = check_save,
	[SQ_OPT_ENV] = check_env,
	[SQ_OPT_EFA] = check_efa,
	[SQ_OPT_NCCL_DEBUG] = check_nccl_debug,
	[SQ_OPT_LOG] = check_log,
	[SQ_OPT_UNSHARE] = check_unshare,
};

/* A boolean flag: no value is 1; a negative flag (--no-..., --container-readonly) sets
 * its pair's setting to the opposite. */
static int parse_bool(const struct value_ctx *c, int id, const char *value, struct parsed *p)
{
	char show[SQ_SHOW_MAX];
	int b = value == NULL ? 1 : sq_bool_parse(value);

	if (b < 0)
		return sq_errf(c->err, c->errlen, "%s: '%s' is not a boolean (use 1 or 0, true or "
			       "false, yes or no, y or n, on or off)", c->what,
			       sq_show(value, show, sizeof(show)));
	p->ival = is_negative(id) ? !b : b;
	p->norm = strdup(p->ival ? "1" : "0");
	return p->norm ? 0 : sq_errf(c->err, c->errlen, "%s: out of memory", c->what);
}

static int parse_value(int id, const char *value, struct parsed *p, char *err, size_t errlen)
{
	struct value_ctx c = { .err = err, .errlen = errlen };
	int rc;

	snprintf(c.what, sizeof(c.what), "--%s", flags[id].name);
	memset(p, 0, sizeof(*p));
	if (flags[id].has_arg == 1 && value == NULL)
		return sq_errf(err, errlen, "%s: needs a value (%s=%s)", c.what, c.what,
			       flags[id].arg_info);
	if (flags[id].has_arg == 0)
		return parse_bool(&c, id, value, p);
	if (value_checks[id] == NULL)
		return sq_errf(err, errlen, "%s: internal error: no parser", c.what);
	rc = value_checks[id](&c, &value, p);
	if (rc != 0)
		return rc < 0 ? -1 : 0;
	p->str = strdup(value);
	p->norm = strdup(value);
	if (p->str == NULL || p->norm == NULL) {
		free(p->str);
		free(p->norm);
		return sq_errf(err, errlen, "%s: out of memory", c.what);
	}
	return 0;
}

/* Store a parsed value into its field; takes p->str. */
static void store(struct sq_opts *o, int id, struct parsed *p)
{
	char **field = NULL;

	switch (slot_of(id)) {
	case SQ_OPT_IMAGE: field = &o->image; break;
	case SQ_OPT_MOUNTS: field = &o->mounts; break;
	case SQ_OPT_WORKDIR: field = &o->workdir; break;
	case SQ_OPT_NAME: field = &o->name; o->name_mode = p->ival; break;
	case SQ_OPT_SAVE: field = &o->save; break;
	case SQ_OPT_ENV: field = &o->env; break;
	case SQ_OPT_NCCL_DEBUG: field = &o->nccl_debug; break;
	case SQ_OPT_PRESTART: field = &o->prestart; break;
	case SQ_OPT_MOUNT_HOME: o->mount_home = p->ival; break;
	case SQ_OPT_REMAP_ROOT: o->remap_root = p->ival; break;
	case SQ_OPT_ENTRYPOINT: o->entrypoint = p->ival; break;
	case SQ_OPT_ENTRYPOINT_LOG: o->entrypoint_log = p->ival; break;
	case SQ_OPT_WRITABLE: o->writable = p->ival; break;
	case SQ_OPT_EFA: o->efa = p->ival; break;
	case SQ_OPT_LOG: o->log = p->ival; break;
	case SQ_OPT_UNSHARE: o->unshare = p->ival; break;
	case SQ_OPT_REUSE: o->reuse = p->ival; break;
	}
	if (field != NULL) {
		free(*field);
		*field = p->str;
	} else {
		free(p->str);
	}
	p->str = NULL;
}

/* Name of the flag or variable a value came from, for messages. */
static void source_name(int id, int source, char *buf, size_t buflen)
{
	if (source == SQ_SRC_ENV_SQUALL)
		sq_opt_env_name(id, "SQUALL_", buf, buflen);
	else if (source == SQ_SRC_ENV_PYXIS)
		sq_opt_env_name(id, "PYXIS_", buf, buflen);
	else
		snprintf(buf, buflen, "--%s", flags[id].name);
}

int sq_opt_set(struct sq_opts *o, int id, const char *value, int source, char *err, size_t errlen)
{
	char src[96], a[SQ_SHOW_MAX], b[SQ_SHOW_MAX];
	struct parsed p;
	int slot;
	size_t n;

	if (id < 0 || id >= SQ_OPT_COUNT)
		return sq_errf(err, errlen, "unknown container option id %d", id);
	if (source < SQ_SRC_ENV_PYXIS || source > SQ_SRC_CLI)
		return sq_errf(err, errlen, "--%s: unknown option source %d", flags[id].name, source);
	slot = slot_of(id);
	if (source < o->source[slot])
		return 0;    /* a stronger source already set it */
	if (parse_value(id, value, &p, err, errlen) != 0) {
		if (source != SQ_SRC_CLI) {
			source_name(id, source, src, sizeof(src));
			n = strlen(err);
			if (n < errlen)
				snprintf(err + n, errlen - n, " [from %s]", src);
		}
		return -1;
	}
	if (source == o->source[slot]) {
		int same = strcmp(p.norm, o->given[slot]) == 0;

		free(p.str);
		free(p.norm);
		if (same)
			return 0;
		source_name(id, source, src, sizeof(src));
		if (opposite(slot) >= 0)
			return sq_errf(err, errlen, "%s conflicts with an earlier opposite setting "
				       "(--%s and --%s: keep one)", src, flags[slot].name,
				       flags[opposite(slot)].name);
		return sq_errf(err, errlen, "%s given twice with different values ('%s' and '%s'; "
			       "give it once)", src, sq_show(o->given[slot], a, sizeof(a)),
			       sq_show(value ? value : "", b, sizeof(b)));
	}
	free(o->given[slot]);
	o->given[slot] = p.norm;
	o->source[slot] = source;
	store(o, id, &p);
	return 0;
}

int sq_opt_set_by_name(struct sq_opts *o, const char *flag, const char *value, int source,
		       char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	int id = sq_opt_lookup(flag);

	if (id < 0)
		return sq_errf(err, errlen, "unknown container option '%s' (see srun --help for the "
			       "--container-* options)", sq_show(flag ? flag : "", show, sizeof(show)));
	return sq_opt_set(o, id, value, source, err, errlen);
}

int sq_opts_load_environ(struct sq_opts *o, char *const envp[], char *err, size_t errlen)
{
	static const struct { const char *prefix; int source; } prefixes[] = {
		/* Stronger source first: a weaker value it overrides is then never parsed. */
		{ "SQUALL_", SQ_SRC_ENV_SQUALL }, { "PYXIS_", SQ_SRC_ENV_PYXIS },
	};
	char var[96];
	const char *v;
	size_t i, k;

	for (k = 0; k < 2; k++) {
		for (i = 0; i < SQ_OPT_COUNT; i++) {
			if (sq_opt_env_name((int)i, prefixes[k].prefix, var, sizeof(var)) != 0)
				continue;
			v = sq_env_value(envp, var);
			if (v == NULL || *v == '\0')
				continue;    /* an empty variable counts as unset */
			if (sq_opt_set(o, (int)i, v, prefixes[k].source, err, errlen) != 0)
				return -1;
		}
	}
	return 0;
}

/* The flag of a pair that was actually given: the negative one when it set the pair's
 * setting to 0. */
static const char *given_flag(const struct sq_opts *o, int slot)
{
	if ((slot == SQ_OPT_MOUNT_HOME && o->mount_home == 0) ||
	    (slot == SQ_OPT_REMAP_ROOT && o->remap_root == 0) ||
	    (slot == SQ_OPT_ENTRYPOINT && o->entrypoint == 0) ||
	    (slot == SQ_OPT_WRITABLE && o->writable == 0) ||
	    (slot == SQ_OPT_REUSE && o->reuse == 0))
		return flags[opposite(slot)].name;
	return flags[slot].name;
}

int sq_opts_check(const struct sq_opts *o, char *warn, size_t warnlen, char *err, size_t errlen)
{
	struct sq_buf b;
	char *w;
	int i;

	if (warn != NULL && warnlen > 0)
		warn[0] = '\0';
	if (o->image != NULL || o->name != NULL) {
		if (o->name != NULL && o->name_mode == SQ_NAME_CREATE && o->image == NULL)
			return sq_errf(err, errlen, "--container-name=%s:create needs "
				       "--container-image (a new container is made from an image)",
				       o->name);
		return 1;
	}
	/* With --container-prestart, sbatch's flags are the prestarted container's. */
	if (o->prestart != NULL)
		return 0;
	sq_buf_init(&b);
	for (i = 0; i < SQ_OPT_COUNT; i++) {
		/* --container-prestart is the job's, inherited by every step: not a step flag. */
		if (i == SQ_OPT_IMAGE || i == SQ_OPT_NAME || i == SQ_OPT_PRESTART ||
		    o->source[i] != SQ_SRC_CLI)
			continue;
		sq_buf_addf(&b, "%s--%s", b.len ? ", " : "", given_flag(o, i));
	}
	w = sq_buf_take(&b);
	if (w != NULL && *w != '\0' && warn != NULL && warnlen > 0)
		snprintf(warn, warnlen, "squall: ignoring %s: no --container-image or "
			 "--container-name given", w);
	free(w);
	return 0;
}

int sq_opt_check_value(const char *flag, const char *value, char *err, size_t errlen)
{
	struct sq_opts o;
	int rc;

	sq_opts_init(&o);
	rc = sq_opt_set_by_name(&o, flag, value, SQ_SRC_CLI, err, errlen);
	sq_opts_free(&o);
	return rc;
}

int sq_opts_kept_for_job(const struct sq_opts *o)
{
	return o->image != NULL && o->name == NULL && o->save == NULL && o->reuse != 0;
}
