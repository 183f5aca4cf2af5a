/* lifecycle.c: see lifecycle.h. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"

static int flag_ok(int v, int lo, int hi)
{
	return v >= lo && v <= hi;
}

int sq_life_decide(const struct sq_life_input *in, struct sq_life_plan *plan)
{
	plan->action = SQ_LIFE_START_STEP;
	if (!flag_ok(in->reuse, 0, 1) || !flag_ok(in->flag, -1, 1) || !flag_ok(in->named, 0, 1) ||
	    !flag_ok(in->save, 0, 1) || !flag_ok(in->batch, 0, 1) ||
	    !flag_ok(in->entrypoint, 0, 1)) {
		plan->why = "invalid input: started for the step";
		return -1;
	}
	/* Containers of the step's own, whatever the reuse settings say. */
	if (in->named) {
		plan->why = "started for the step (named container)";
		return 0;
	}
	if (in->save) {
		plan->why = "started for the step (a container of its own: --container-save or "
			    "use_enroot_load)";
		return 0;
	}
	if (in->flag == 0) {
		plan->why = "kept containers off (--no-container-reuse)";
		return 0;
	}
	if (in->flag == -1 && !in->reuse) {
		plan->why = "kept containers off (plugstack container_reuse=0)";
		return 0;
	}
	if (in->batch) {
		plan->why = "the batch step runs once";
		return 0;
	}
	if (in->entrypoint) {
		plan->why = "the image's entrypoint runs at each start (--container-entrypoint)";
		return 0;
	}
	plan->action = SQ_LIFE_KEPT;
	plan->why = "the job's kept container, fresh layer";
	return 0;
}

/* Differ between steps; nothing Enroot or its standard hooks set up depends on them. */
static const char *const step_exact[] = {
	"SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_LAUNCHER_PORT", "SLURM_SRUN_COMM_PORT",
	"SLURM_SRUN_COMM_HOST", "SLURM_STEP_RESV_PORTS", "SLURM_LAUNCH_NODE_IPADDR",
	"SLURM_PTY_PORT", "SLURM_PTY_WIN_COL", "SLURM_PTY_WIN_ROW",
	"SLURM_UMASK", "SLURM_TASK_PID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_GTIDS",
	"SLURM_SPANK__SLURM_SPANK_OPTION_squall_container_log", "OLDPWD", "SHLVL", "_", NULL
};

int sq_life_env_step_specific(const char *name)
{
	for (const char *const *p = step_exact; *p; p++)
		if (strcmp(*p, name) == 0)
			return 1;
	return 0;
}

/* How many tasks a step runs and where (srun -n 1, -n 8, -N 2 in one job): the runtime
 * sets up nothing from them, and each task gets its own step's values (env.h: a step's
 * SLURM_* win over the container's copy), unless a hook derives something from them. */
static const char *const shape_exact[] = {
	"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_NUM_TASKS", "SLURM_TASKS_PER_NODE",
	"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS_PER_SOCKET",
	"SLURM_NTASKS_PER_CORE", "SLURM_NTASKS_PER_GPU", "SLURM_DISTRIBUTION",
	"SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST", "SLURM_NNODES", "SLURM_NODELIST",
	"SLURM_THREADS", "SLURM_OVERCOMMIT", "SLURM_CPUS_PER_TASK", NULL
};
static const char *const shape_prefix[] = { "SLURM_CPU_BIND", "SLURM_MEM_BIND", NULL };

int sq_life_env_task_shape(const char *name)
{
	for (const char *const *p = shape_exact; *p; p++)
		if (strcmp(*p, name) == 0)
			return 1;
	for (const char *const *p = shape_prefix; *p; p++)
		if (strncmp(*p, name, strlen(*p)) == 0)
			return 1;
	return 0;
}

static int ident_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

int sq_life_hooks_read(const char *hooks, const char *name)
{
	static const char family[] = "SLURM_";
	size_t flen = sizeof(family) - 1;

	if (hooks == NULL)
		return 1;
	for (const char *p = strstr(hooks, family); p != NULL; p = strstr(p + 1, family)) {
		size_t n = flen;
		if (p > hooks && ident_char(p[-1]))
			continue;    /* MY_SLURM_X is another name */
		while (ident_char(p[n]))
			n++;
		/* The name itself, or a prefix of it (compgen -e SLURM_STEP_). The bare family
		 * (Enroot's 50-slurm-pmi copies every SLURM_* into the container) reads nothing
		 * a task does not get from its own step. */
		if (n > flen && strncmp(p, name, n) == 0)
			return 1;
	}
	return 0;
}

/* Every process has them, and each task gets its own step's values in any container;
 * and the job's identity, which slurmstepd sets for each task from the job itself (a
 * step's copy is whatever the submitting shell had: SLURM_JOB_UID=0 under sudo). */
static const char *const own_exact[] = {
	"PATH", "HOME", "USER", "LOGNAME", "PWD", "SHELL", "TERM", "LANG", "LD_LIBRARY_PATH",
	"PYTHONPATH", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_UID", "SLURM_JOB_GID",
	"SLURM_JOB_USER", NULL
};

/* 1 when hooks holds name as a word, or a word of 4 or more characters ending in '_'
 * that begins name (compgen -e NVIDIA_REQUIRE_). */
static int hooks_name(const char *hooks, const char *name)
{
	for (const char *p = hooks; *p;) {
		size_t n = 0;

		if (!ident_char(*p) || (p > hooks && ident_char(p[-1]))) {
			p++;
			continue;
		}
		while (ident_char(p[n]))
			n++;
		if ((n == strlen(name) && strncmp(p, name, n) == 0) ||
		    (n >= 4 && p[n - 1] == '_' && strncmp(p, name, n) == 0))
			return 1;
		p += n;
	}
	return 0;
}

int sq_life_env_runtime_reads(const char *hooks, const char *name)
{
	if (strncmp(name, "ENROOT_", 7) == 0)
		return 1;
	if (hooks == NULL || sq_life_env_step_specific(name) || sq_life_env_task_shape(name))
		return 0;
	for (const char *const *p = own_exact; *p; p++)
		if (strcmp(*p, name) == 0)
			return 0;
	if (strncmp(name, "SLURM_", 6) == 0)
		return sq_life_hooks_read(hooks, name);
	return hooks_name(hooks, name);
}

/* The value of the variable of that name in env, NULL when unset. */
static const char *env_named(char *const env[], const char *name, size_t len)
{
	for (size_t i = 0; env != NULL && env[i] != NULL; i++)
		if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
			return env[i] + len + 1;
	return NULL;
}

/* Is a variable of `from` that the start reads set otherwise in `other`? */
static int one_way(char *const from[], char *const other[], const char *hooks, char *name,
		   size_t namelen)
{
	for (size_t i = 0; from != NULL && from[i] != NULL; i++) {
		const char *eq = strchr(from[i], '=');
		size_t len = eq ? (size_t)(eq - from[i]) : strlen(from[i]);
		const char *theirs = env_named(other, from[i], len);
		char var[256];

		if (len == 0 || len >= sizeof(var))
			continue;
		memcpy(var, from[i], len);
		var[len] = '\0';
		if (!sq_life_env_runtime_reads(hooks, var))
			continue;
		if (theirs == NULL || strcmp(theirs, eq ? eq + 1 : "") != 0) {
			snprintf(name, namelen, "%s", var);
			return 1;
		}
	}
	return 0;
}

int sq_life_env_differs(char *const a[], char *const b[], const char *hooks, char *name,
			size_t namelen)
{
	if (namelen > 0)
		name[0] = '\0';
	return one_way(a, b, hooks, name, namelen) || one_way(b, a, hooks, name, namelen);
}

/* Two independent FNV-1a streams (64 bits each, different bases and primes). */
struct hash2 { uint64_t a, b; };

static void hash_bytes(struct hash2 *h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h->a = (h->a ^ (unsigned char)s[i]) * 1099511628211ULL;
		h->b = (h->b ^ (unsigned char)s[i]) * 0x100000001b3ULL * 31ULL + 0x9e3779b97f4a7c15ULL;
	}
}

/* Each item with its length first, so that ("ab","c") and ("a","bc") differ. */
static void hash_item(struct hash2 *h, const char *s)
{
	char len[24];
	int n = snprintf(len, sizeof(len), "%zu:", strlen(s));

	hash_bytes(h, len, (size_t)n);
	hash_bytes(h, s, strlen(s));
}

static int by_text(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

int sq_life_key(const char *const parts[], char *const env[], const char *hooks,
		char out[33])
{
	struct hash2 h = { 1469598103934665603ULL, 0x84222325cbf29ce4ULL };
	const char **sorted;
	size_t n = 0, kept = 0;

	for (size_t i = 0; parts != NULL && parts[i] != NULL; i++)
		hash_item(&h, parts[i]);
	hash_item(&h, "--env--");
	while (env != NULL && env[n] != NULL)
		n++;
	sorted = calloc(n + 1, sizeof(*sorted));
	if (sorted == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(env[i], '=');
		char name[256];
		size_t len = eq ? (size_t)(eq - env[i]) : strlen(env[i]);

		if (len >= sizeof(name))
			len = sizeof(name) - 1;
		memcpy(name, env[i], len);
		name[len] = '\0';
		if (!sq_life_env_step_specific(name) &&
		    !(sq_life_env_task_shape(name) && !sq_life_hooks_read(hooks, name)))
			sorted[kept++] = env[i];
	}
	qsort(sorted, kept, sizeof(*sorted), by_text);
	for (size_t i = 0; i < kept; i++)
		hash_item(&h, sorted[i]);
	free(sorted);
	snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, h.a, h.b);
	return 0;
}
