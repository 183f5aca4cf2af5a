/* env.c: the cleaned environment of runtime calls and the task/container merge. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "quote.h"
#include "strbuf.h"
#include "strv.h"

/* Variables that change what bash (enroot is a bash script) or the loader does. */
static const char *const denied_exact[] = {
	"GLIBC_TUNABLES", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "CDPATH",
	"GLOBIGNORE", "PS4", "PROMPT_COMMAND", NULL
};
static const char *const denied_prefix[] = { "LD_", "BASH_FUNC_", NULL };

/* The job's ENROOT_* settings reach the runtime (ENROOT_ROOTFS_WRITABLE=yes srun ... works
 * as with Pyxis), except, as Pyxis denies them, the runtime's own directories and the
 * image import settings, which are the site's. */
static const char *const denied_enroot[] = {
	"ENROOT_LIBRARY_PATH", "ENROOT_LIBEXEC_PATH", "ENROOT_SYSCONF_PATH",
	"ENROOT_RUNTIME_PATH", "ENROOT_CACHE_PATH", "ENROOT_DATA_PATH", "ENROOT_TEMP_PATH",
	"ENROOT_ALLOW_SUPERUSER", "ENROOT_GZIP_PROGRAM", "ENROOT_ZSTD_OPTIONS",
	"ENROOT_SQUASH_OPTIONS", "ENROOT_MAX_PROCESSORS", "ENROOT_MAX_CONNECTIONS",
	"ENROOT_CONNECT_TIMEOUT", "ENROOT_TRANSFER_TIMEOUT", "ENROOT_TRANSFER_RETRIES",
	"ENROOT_LOGIN_FILE", "ENROOT_ALLOW_HTTP", "ENROOT_BUNDLE_ALL", "ENROOT_BUNDLE_CHECKSUM",
	NULL
};
static const char *const no_prefix[] = { NULL };

/* Locale variables Pyxis removes from the tasks unless --container-env names them: a host
 * locale the image lacks makes perl and python complain or fail. */
static const char *const locale_vars[] = { "LANG", "LC_ALL", "LANGUAGE", NULL };

/* Variables that differ between the tasks sharing one container. */
static const char *const task_exact[] = {
	"SLURM_PROCID", "SLURM_LOCALID", "SLURM_TASK_PID", "SLURM_GTIDS",
	"PMI_RANK", "PMI_FD", "PMIX_RANK",
	"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
	"ZE_AFFINITY_MASK", NULL
};
static const char *const task_prefix[] = {
	"SLURM_CPU_BIND", "SLURM_MEM_BIND", "OMPI_COMM_WORLD_", NULL
};

/* Variables that describe the step: the task's own value wins over a copy the container
 * took when it started (Enroot's 50-slurm-pmi hook copies them; a later step may join). */
static const char *const step_prefix[] = { "SLURM_", "PMIX_", "PMI_", NULL };

static int matches(const char *name, size_t n, const char *const *exact,
		   const char *const *prefix)
{
	for (; *exact; exact++)
		if (strlen(*exact) == n && strncmp(*exact, name, n) == 0)
			return 1;
	for (; *prefix; prefix++)
		if (strlen(*prefix) <= n && strncmp(*prefix, name, strlen(*prefix)) == 0)
			return 1;
	return 0;
}

static int task_specific_n(const char *name, size_t n)
{
	return matches(name, n, task_exact, task_prefix);
}

static int denied_n(const char *name, size_t n)
{
	return matches(name, n, denied_exact, denied_prefix) ||
	       matches(name, n, denied_enroot, no_prefix) || task_specific_n(name, n);
}

int sq_env_task_specific(const char *name)
{
	return task_specific_n(name, strlen(name));
}

int sq_env_denied(const char *name)
{
	return denied_n(name, strlen(name));
}

/* A NULL-terminated array of heap strings that grows. */
struct vec {
	char **v;
	size_t n, cap;
};

static int vec_push(struct vec *a, char *s)
{
	if (s == NULL)
		return -1;
	if (a->n + 1 >= a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 32;
		char **v = realloc(a->v, cap * sizeof(*v));

		if (v == NULL) {
			free(s);
			return -1;
		}
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
	return 0;
}

/* Index of the entry whose key is key[0..n), or -1. */
static long vec_find(const struct vec *a, const char *key, size_t n)
{
	size_t i;

	for (i = 0; i < a->n; i++)
		if (strncmp(a->v[i], key, n) == 0 && a->v[i][n] == '=')
			return (long)i;
	return -1;
}

/* Set KEY=VALUE (entry) in a: replace in place or append. Takes ownership of entry. */
static int vec_set(struct vec *a, char *entry)
{
	long i;

	if (entry == NULL)
		return -1;
	i = vec_find(a, entry, (size_t)(strchr(entry, '=') - entry));
	if (i < 0)
		return vec_push(a, entry);
	free(a->v[i]);
	a->v[i] = entry;
	return 0;
}

/* Result array: never NULL on success, even when empty. */
static char **vec_take(struct vec *a)
{
	char **v = a->v;

	if (v == NULL)
		v = calloc(1, sizeof(*v));
	a->v = NULL;
	a->n = a->cap = 0;
	return v;
}

void sq_env_free(char **env)
{
	sq_strv_free(env);
}

static void vec_release(struct vec *a)
{
	sq_env_free(a->v);
	a->v = NULL;
	a->n = a->cap = 0;
}

int sq_env_clean(char *const envp[], char ***out, char *err, size_t errlen)
{
	struct vec a = { NULL, 0, 0 };
	const char *eq;
	size_t i;

	*out = NULL;
	for (i = 0; envp != NULL && envp[i] != NULL; i++) {
		eq = strchr(envp[i], '=');
		if (eq == NULL || eq == envp[i] || denied_n(envp[i], (size_t)(eq - envp[i])))
			continue;
		if (vec_push(&a, strdup(envp[i])) != 0) {
			vec_release(&a);
			return sq_errf(err, errlen, "environment: out of memory");
		}
	}
	*out = vec_take(&a);
	if (*out == NULL)
		return sq_errf(err, errlen, "environment: out of memory");
	return 0;
}

int sq_env_check_names(const char *csv, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], nshow[SQ_SHOW_MAX], name[256];
	const char *s, *e;
	size_t n;

	if (csv == NULL || *csv == '\0')
		return sq_errf(err, errlen, "--container-env: empty value (give NAME[,NAME...])");
	for (s = csv; ; s = e + 1) {
		e = strchr(s, ',');
		n = e ? (size_t)(e - s) : strlen(s);
		if (n == 0)
			return sq_errf(err, errlen, "--container-env: '%s': empty name (remove the "
				       "extra ',')", sq_show(csv, show, sizeof(show)));
		if (!sq_is_identifier(s, n)) {
			snprintf(name, sizeof(name), "%.*s", (int)(n < 200 ? n : 200), s);
			return sq_errf(err, errlen, "--container-env: '%s' is not a variable name "
				       "(names are letters, digits and '_', not starting with a digit)",
				       sq_show(name, nshow, sizeof(nshow)));
		}
		if (e == NULL)
			return 0;
	}
}

/* Is key[0..n) one of the comma-separated names in keep? */
static int in_keep(const char *keep, const char *key, size_t n)
{
	const char *s, *e;

	if (keep == NULL)
		return 0;
	for (s = keep; *s; s = *e ? e + 1 : e) {
		e = strchr(s, ',');
		if (e == NULL)
			e = s + strlen(s);
		if ((size_t)(e - s) == n && strncmp(s, key, n) == 0)
			return 1;
	}
	return 0;
}

static int task_has(char *const task_env[], const char *key, size_t n)
{
	size_t i;

	for (i = 0; task_env != NULL && task_env[i] != NULL; i++)
		if (strncmp(task_env[i], key, n) == 0 && task_env[i][n] == '=')
			return 1;
	return 0;
}

/* Apply rules (b) to the container block, setting the winners into a. */
static int overlay_into(struct vec *a, const char *block, size_t len, const char *keep,
			char *const task_env[])
{
	size_t off = 0, n, klen;
	const char *entry, *eq, *nul;

	while (off < len) {
		entry = block + off;
		nul = memchr(entry, '\0', len - off);
		n = nul ? (size_t)(nul - entry) : len - off;
		off += n + 1;
		eq = memchr(entry, '=', n);
		if (eq == NULL)
			continue;    /* not KEY=VALUE */
		klen = (size_t)(eq - entry);
		/* the block need not end in NUL: never compare past klen */
		if (!sq_is_identifier(entry, klen) || (klen >= 7 && memcmp(entry, "ENROOT_", 7) == 0) ||
		    task_specific_n(entry, klen))
			continue;
		if ((in_keep(keep, entry, klen) || matches(entry, klen, no_prefix, step_prefix)) &&
		    task_has(task_env, entry, klen))
			continue;    /* --container-env, step variables: the task's value stays */
		if (!in_keep(keep, entry, klen) && klen > 6 && memcmp(entry, "SLURM_", 6) == 0)
			continue;    /* Slurm's, not the task's: a copy the container took from
				      * an earlier step (srun -n 8 after -n 1) never shows */
		if (vec_set(a, sq_strndup(entry, n)) != 0)
			return -1;
	}
	return 0;
}

int sq_env_overlay(const char *block, size_t len, const char *keep, char *const task_env[],
		   char ***out, char *err, size_t errlen)
{
	struct vec a = { NULL, 0, 0 };

	*out = NULL;
	if (overlay_into(&a, block, block ? len : 0, keep, task_env) != 0) {
		vec_release(&a);
		return sq_errf(err, errlen, "container environment: out of memory");
	}
	*out = vec_take(&a);
	if (*out == NULL)
		return sq_errf(err, errlen, "container environment: out of memory");
	return 0;
}

int sq_env_merge(char *const task_env[], const char *block, size_t len, const char *keep,
		 char ***out, char *err, size_t errlen)
{
	struct vec a = { NULL, 0, 0 };
	size_t i;

	*out = NULL;
	for (i = 0; task_env != NULL && task_env[i] != NULL; i++) {
		const char *eq = strchr(task_env[i], '=');
		size_t n = eq ? (size_t)(eq - task_env[i]) : 0;

		if (n == 0 || (matches(task_env[i], n, locale_vars, no_prefix) &&
			       !in_keep(keep, task_env[i], n)))
			continue;
		if (vec_set(&a, strdup(task_env[i])) != 0)
			goto oom;
	}
	if (overlay_into(&a, block, block ? len : 0, keep, task_env) != 0)
		goto oom;
	*out = vec_take(&a);
	if (*out != NULL)
		return 0;
oom:
	vec_release(&a);
	return sq_errf(err, errlen, "container environment: out of memory");
}

int sq_env_task_unset(char *const task_env[], const char *keep, char ***out, char *err,
		      size_t errlen)
{
	struct vec a = { NULL, 0, 0 };

	*out = NULL;
	for (size_t i = 0; locale_vars[i] != NULL; i++) {
		size_t n = strlen(locale_vars[i]);

		if (in_keep(keep, locale_vars[i], n) || !task_has(task_env, locale_vars[i], n))
			continue;
		if (vec_push(&a, strdup(locale_vars[i])) != 0) {
			vec_release(&a);
			return sq_errf(err, errlen, "task environment: out of memory");
		}
	}
	*out = vec_take(&a);
	return *out ? 0 : sq_errf(err, errlen, "task environment: out of memory");
}

int sq_env_keep_lines(char *const job_env[], const char *keep, char ***out, char *err,
		      size_t errlen)
{
	struct vec a = { NULL, 0, 0 };

	*out = NULL;
	for (size_t i = 0; keep != NULL && job_env != NULL && job_env[i] != NULL; i++) {
		const char *eq = strchr(job_env[i], '=');
		size_t n = eq ? (size_t)(eq - job_env[i]) : 0;

		if (n == 0 || !in_keep(keep, job_env[i], n) || strncmp(job_env[i], "ENROOT_", 7) == 0)
			continue;
		if (vec_set(&a, strdup(job_env[i])) != 0) {
			vec_release(&a);
			return sq_errf(err, errlen, "--container-env: out of memory");
		}
	}
	*out = vec_take(&a);
	return *out ? 0 : sq_errf(err, errlen, "--container-env: out of memory");
}

const char *sq_env_value(char *const env[], const char *name)
{
	size_t n = strlen(name);
	const char *found = NULL;

	for (size_t i = 0; env != NULL && env[i] != NULL; i++)
		if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
			found = env[i] + n + 1;
	return found;
}

void sq_env_block_drop(char *block, size_t *len, const char *entry)
{
	size_t n = strlen(entry) + 1, at = 0;

	while (block != NULL && at < *len) {
		size_t here = strnlen(block + at, *len - at) + 1;
		if (here == n && memcmp(block + at, entry, n - 1) == 0) {
			memmove(block + at, block + at + here, *len - at - here);
			*len -= here;
			continue;
		}
		at += here;
	}
}
