/* config.c: plugstack.conf arguments to struct sq_config, defaults first. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "nodecache.h"
#include "options.h"
#include "quote.h"
#include "strbuf.h"

#define WHAT "plugstack.conf"

enum kind { K_PATH, K_OPTPATH, K_OFFPATH, K_BOOL, K_SCOPE, K_EFA, K_LOG, K_GB, K_NODES, K_SECONDS };

struct key {
	const char *name;
	enum kind kind;
	const char *def;     /* default, parsed like a value from the file (NULL: unset) */
	size_t off;          /* offsetof the field in struct sq_config */
};

#define F(field) offsetof(struct sq_config, field)
static const struct key keys[] = {
	{ "runtime_path", K_PATH, "/run/squall", F(runtime_path) },
	{ "enroot", K_OPTPATH, NULL, F(enroot) },
	{ "sqshbuild", K_PATH, "/usr/local/bin/sqshbuild", F(sqshbuild) },
	{ "image_cache", K_PATH, "/fsx/squall/images", F(image_cache) },
	{ "container_scope", K_SCOPE, "global", F(container_scope) },
	{ "execute_entrypoint", K_BOOL, "0", F(execute_entrypoint) },
	{ "efa", K_EFA, "auto", F(efa) },
	{ "efa_sysfs_root", K_PATH, "/sys", F(efa_sysfs_root) },
	{ "efa_dev_root", K_PATH, "/dev", F(efa_dev_root) },
	{ "efa_opt_root", K_PATH, "/opt/amazon", F(efa_opt_root) },
	{ "sbatch_support", K_BOOL, "1", F(sbatch_support) },
	{ "log", K_LOG, "quiet", F(log) },
	{ "use_squashfuse", K_BOOL, "0", F(use_squashfuse) },
	{ "use_enroot_load", K_BOOL, "0", F(use_enroot_load) },
	{ "importer", K_OPTPATH, NULL, F(importer) },
	{ "container_name_strict", K_BOOL, "0", F(container_name_strict) },
	{ "container_reuse", K_BOOL, "1", F(container_reuse) },
	{ "local_cache", K_PATH, "/var/lib/squall/cache", F(local_cache) },
	{ "local_cache_gb", K_GB, "20", F(local_cache_gb) },
	{ "local_cache_max_nodes", K_NODES, "16", F(local_cache_max_nodes) },
	{ "local_cache_copy_wait", K_SECONDS, "90", F(local_cache_copy_wait) },
	{ "prestart_srun_jobs", K_BOOL, "0", F(prestart_srun_jobs) },
	{ "metrics_dir", K_OFFPATH, "/var/lib/prometheus/node-exporter", F(metrics_dir) },
};
#undef F
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

/* One argument being set: its key and value, and what a message about it says. */
struct arg_ctx {
	const struct key *k;
	const char *value;
	char show[SQ_SHOW_MAX];  /* the whole argument, as messages show it */
	char what[96];           /* "plugstack.conf: argument KEY" */
	char *err;
	size_t errlen;
};

/* K_PATH, K_OPTPATH: an absolute path without spaces, stored as a copy. */
static int set_path(const struct arg_ctx *a, char **sp)
{
	const struct key *k = a->k;
	char *copy;

	if (sq_text_check(a->what, a->value, PATH_MAX - 1, a->err, a->errlen) != 0)
		return -1;
	if (a->value[0] != '/' || strchr(a->value, ' ') != NULL)
		return sq_errf(a->err, a->errlen, WHAT ": '%s': %s must be an absolute path "
			       "without spaces (e.g. %s=%s)", a->show, k->name, k->name,
			       k->def ? k->def : "/usr/bin/enroot");
	copy = strdup(a->value);
	if (copy == NULL)
		return sq_errf(a->err, a->errlen, WHAT ": out of memory");
	free(*sp);
	*sp = copy;
	return 0;
}

static int set_bool(const struct arg_ctx *a, int *ip)
{
	*ip = sq_bool_parse(a->value);
	if (*ip < 0)
		return sq_errf(a->err, a->errlen, WHAT ": '%s': %s must be a boolean (1, true, "
			       "yes, y or 0, false, no, n)", a->show, a->k->name);
	return 0;
}

static int set_scope(const struct arg_ctx *a, int *ip)
{
	if (strcmp(a->value, "job") == 0)
		*ip = SQ_SCOPE_JOB;
	else if (strcmp(a->value, "global") == 0)
		*ip = SQ_SCOPE_GLOBAL;
	else
		return sq_errf(a->err, a->errlen, WHAT ": '%s': container_scope must be job or "
			       "global", a->show);
	return 0;
}

/* K_GB, K_NODES, K_SECONDS: a whole number (digits only) within the kind's limits. */
static int set_count(const struct arg_ctx *a, int *ip)
{
	int gb = a->k->kind == K_GB, secs = a->k->kind == K_SECONDS;
	long min = secs ? 1 : 0, max = gb ? 100000 : secs ? 3600 : 1000000;
	char *end;
	long v = strtol(a->value, &end, 10);

	if (a->value[0] >= '0' && a->value[0] <= '9' && *end == '\0' && v >= min && v <= max) {
		*ip = (int)v;
		return 0;
	}
	if (secs)
		return sq_errf(a->err, a->errlen, WHAT ": '%s': %s must be a whole number of "
			       "seconds from 1 to 3600", a->show, a->k->name);
	if (gb)
		return sq_errf(a->err, a->errlen, WHAT ": '%s': %s must be a whole number of GiB "
			       "from 0 (off) to 100000", a->show, a->k->name);
	return sq_errf(a->err, a->errlen, WHAT ": '%s': %s must be a whole number of nodes "
		       "from 0 (any number) to 1000000", a->show, a->k->name);
}

/* The keys' names, ", " between, in buf (the table's order). */
static const char *known_keys(char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t k = 0; k < NKEYS && used < len; k++) {
		int n = snprintf(buf + used, len - used, "%s%s", k ? ", " : "", keys[k].name);

		if (n < 0)
			break;
		used += (size_t)n;
	}
	return buf;
}

static int set_key(struct sq_config *c, const struct key *k, const char *arg, const char *value,
		   char *err, size_t errlen)
{
	struct arg_ctx a = { .k = k, .value = value, .err = err, .errlen = errlen };
	char *base = (char *)c;
	int *ip = (int *)(base + k->off);
	char **sp = (char **)(base + k->off);

	snprintf(a.what, sizeof(a.what), WHAT ": argument %s", k->name);
	sq_show(arg, a.show, sizeof(a.show));
	switch (k->kind) {
	case K_OPTPATH:
		if (value == NULL)
			return 0;    /* the default: unset */
		return set_path(&a, sp);
	case K_OFFPATH:
		if (strcmp(value, "none") == 0) {
			free(*sp);
			*sp = NULL;  /* off */
			return 0;
		}
		return set_path(&a, sp);
	case K_PATH:
		return set_path(&a, sp);
	case K_BOOL:
		return set_bool(&a, ip);
	case K_SCOPE:
		return set_scope(&a, ip);
	case K_EFA:
		return sq_efa_setting_parse(a.what, value, ip, err, errlen);
	case K_LOG:
		return sq_log_setting_parse(a.what, value, ip, err, errlen);
	case K_GB:
	case K_NODES:
	case K_SECONDS:
		return set_count(&a, ip);
	}
	return sq_errf(err, errlen, WHAT ": internal error on %s", k->name);
}

/* What the plugin's kept container (spank/plugin/kept.c) needs of the config beyond the
 * step's facts it is handed: set by each successful parse (once per plugin process). */

void sq_config_free(struct sq_config *c)
{
	free(c->runtime_path);
	free(c->enroot);
	free(c->sqshbuild);
	free(c->image_cache);
	free(c->efa_sysfs_root);
	free(c->efa_dev_root);
	free(c->efa_opt_root);
	free(c->importer);
	free(c->local_cache);
	free(c->metrics_dir);
	memset(c, 0, sizeof(*c));
}

int sq_config_parse(struct sq_config *c, int argc, char *const argv[], char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	int given[NKEYS] = { 0 };
	size_t k;
	int i;

	memset(c, 0, sizeof(*c));
	for (k = 0; k < NKEYS; k++)
		if (set_key(c, &keys[k], keys[k].def, keys[k].def, err, errlen) != 0)
			goto fail;
	for (i = 0; i < argc; i++) {
		const char *arg = argv[i], *eq;
		size_t n;

		if (arg == NULL)
			break;
		sq_show(arg, show, sizeof(show));
		eq = strchr(arg, '=');
		if (eq == NULL) {
			sq_errf(err, errlen, WHAT ": argument '%s' is not key=value (e.g. "
				"runtime_path=/run/squall)", show);
			goto fail;
		}
		n = (size_t)(eq - arg);
		for (k = 0; k < NKEYS; k++)
			if (strlen(keys[k].name) == n && strncmp(keys[k].name, arg, n) == 0)
				break;
		if (k == NKEYS) {
			char known[640];

			sq_errf(err, errlen, WHAT ": unknown argument '%s' (known: %s)", show,
				known_keys(known, sizeof(known)));
			goto fail;
		}
		if (given[k]) {
			sq_errf(err, errlen, WHAT ": argument %s given twice (keep one)", keys[k].name);
			goto fail;
		}
		given[k] = 1;
		if (eq[1] == '\0') {
			sq_errf(err, errlen, WHAT ": '%s': empty value for %s (give a value or drop "
				"the argument for the default %s)", show, keys[k].name,
				keys[k].def ? keys[k].def : "(none)");
			goto fail;
		}
		if (set_key(c, &keys[k], arg, eq + 1, err, errlen) != 0)
			goto fail;
	}
	return 0;
fail:
	sq_config_free(c);
	return -1;
}
