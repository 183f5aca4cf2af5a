/* stepconf.c: see stepconf.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "efa.h"
#include "env.h"
#include "mounts.h"
#include "mounts_exist.h"
#include "quote.h"
#include "report.h"
#include "stepconf.h"
#include "strbuf.h"
#include "strv.h"


int sq_env_put(char ***env, const char *key, const char *value)
{
	size_t klen = strlen(key), n = 0;
	char *line = NULL;

	if (asprintf(&line, "%s=%s", key, value) < 0)
		return -1;
	for (n = 0; *env != NULL && (*env)[n] != NULL; n++) {
		if (strncmp((*env)[n], key, klen) == 0 && (*env)[n][klen] == '=') {
			free((*env)[n]);
			(*env)[n] = line;
			return 0;
		}
	}
	if (sq_strv_push(env, &n, line) < 0) {
		free(line);
		return -1;
	}
	free(line);
	return 0;
}

static int put_setting(char ***env, const char *key, int value)
{
	return value < 0 ? 0 : sq_env_put(env, key, value ? "y" : "n");
}

int sq_runtime_path(const char *enroot, char *buf, size_t buflen)
{
	const char *stepd = getenv("PATH");

	return sq_runtime_path_from(enroot, stepd != NULL && *stepd != '\0' ? stepd :
					    SQ_STANDARD_PATH, buf, buflen);
}

int sq_runtime_path_from(const char *enroot, const char *stepd, char *buf, size_t buflen)
{
	char real[PATH_MAX], *slash;
	int n;

	if (enroot == NULL || realpath(enroot, real) == NULL)
		snprintf(real, sizeof(real), "%s", enroot ? enroot : "");
	slash = strrchr(real, '/');
	if (slash != NULL && slash != real) {
		*slash = '\0';
		n = snprintf(buf, buflen, "%s:%s", real, stepd);
	} else {
		n = snprintf(buf, buflen, "%s", stepd);
	}
	return n < 0 || (size_t)n >= buflen ? -1 : 0;
}

int sq_find_enroot(char **out, char *err, size_t errlen)
{
	const char *path = getenv("PATH");
	char dir[PATH_MAX], cand[PATH_MAX + 8];
	const char *s, *e;

	*out = NULL;
	if (path == NULL || *path == '\0')
		path = SQ_STANDARD_PATH;
	for (s = path;; s = e + 1) {
		size_t n;
		e = strchr(s, ':');
		n = e ? (size_t)(e - s) : strlen(s);
		if (n > 0 && n < sizeof(dir) && s[0] == '/') {
			memcpy(dir, s, n);
			dir[n] = '\0';
			snprintf(cand, sizeof(cand), "%s/enroot", dir);
			if (access(cand, X_OK) == 0) {
				*out = strdup(cand);
				return *out ? 0 : sq_errf(err, errlen, "out of memory");
			}
		}
		if (e == NULL)
			break;
	}
	sq_errf(err, errlen, "container runtime not found: no 'enroot' on slurmstepd's PATH (%s): "
		"install Enroot there or set enroot= in plugstack.conf", path);
	return -1;
}

int sq_stepconf_env(char *const job_env[], const struct sq_opts *o, const char *runtime_dir,
		    const char *path, char ***out, char *err, size_t errlen)
{
	char **clean = NULL, *rt = NULL;

	*out = NULL;
	if (sq_env_clean(job_env, &clean, err, errlen) < 0)
		return -1;
	if (asprintf(&rt, "%s/enroot", runtime_dir) < 0)
		rt = NULL;
	if (rt == NULL || sq_env_put(&clean, "PATH", path) < 0 ||
	    sq_env_put(&clean, "ENROOT_RUNTIME_PATH", rt) < 0 ||
	    put_setting(&clean, "ENROOT_MOUNT_HOME", o->mount_home) < 0 ||
	    put_setting(&clean, "ENROOT_REMAP_ROOT", o->remap_root) < 0 ||
	    put_setting(&clean, "ENROOT_ROOTFS_WRITABLE", o->writable) < 0) {
		free(rt);
		sq_env_free(clean);
		sq_errf(err, errlen, "out of memory building the runtime's environment");
		return -1;
	}
	free(rt);
	*out = clean;
	return 0;
}

int sq_stepconf_write(const char *path, const struct sq_conf_spec *spec, char *err, size_t errlen)
{
	char *text = NULL;
	int rc;

	if (sq_conf_render(spec, &text, err, errlen) < 0)
		return -1;
	rc = sq_stepfile_write(path, text, err, errlen);
	sq_str_free(text);
	return rc;
}

int sq_stepfile_write(const char *path, const char *text, char *err, size_t errlen)
{
	size_t len, off = 0;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return sq_errf(err, errlen, "cannot create the runtime's file %s: %s", path,
			       strerror(errno));
	len = strlen(text);
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			sq_errf(err, errlen, "cannot write %s: %s", path, strerror(errno));
			close(fd);
			goto fail;
		}
		off += (size_t)w;
	}
	if (close(fd) == 0)
		return 0;
	sq_errf(err, errlen, "cannot write %s: %s", path, strerror(errno));
fail:
	unlink(path);
	return -1;
}

/* The runtime and the environment it runs with (fixed PATH). 0 ok, -1 (error kept). */
int sq_stepconf_runtime(const struct sq_config *cfg, const struct sq_opts *opt,
			char *const job_env[], const char *runtime_dir, char **enroot,
			char ***runtime_env)
{
	char err[SQ_ERR_LEN], path[PATH_MAX * 2 + 8], rt_dir[PATH_MAX + 16];

	if (cfg->enroot != NULL)
		*enroot = strdup(cfg->enroot);
	else if (sq_find_enroot(enroot, err, sizeof(err)) < 0)
		return sq_report_fail(err);
	if (*enroot == NULL)
		return sq_report_fail("out of memory");
	if (sq_runtime_path(*enroot, path, sizeof(path)) < 0)
		return sq_report_fail("the runtime's PATH is too long (slurmstepd's PATH)");
	if (sq_stepconf_env(job_env, opt, runtime_dir, path, runtime_env, err,
			    sizeof(err)) < 0)
		return sq_report_fail(err);
	snprintf(rt_dir, sizeof(rt_dir), "%s/enroot", runtime_dir);
	if (mkdir(rt_dir, 0700) < 0 && errno != EEXIST) {
		sq_errf(err, sizeof(err), "cannot create %s: %s (plugstack.conf runtime_path)",
			rt_dir, strerror(errno));
		return sq_report_fail(err);
	}
	if (access(*enroot, X_OK) < 0) {
		sq_errf(err, sizeof(err), "container runtime not found: %s is not executable "
			"on this node (%s): install Enroot or fix enroot= in plugstack.conf",
			*enroot, strerror(errno));
		return sq_report_fail(err);
	}
	return 0;
}

/* Names the user set in the job environment among the variables an EFA plan sets. */
static char *efa_user_set(char *const job_env[])
{
	struct sq_buf csv;

	sq_buf_init(&csv);
	for (int i = 0; sq_efa_var_name(i) != NULL; i++) {
		const char *name = sq_efa_var_name(i);
		size_t nl = strlen(name);
		for (size_t j = 0; job_env != NULL && job_env[j] != NULL; j++) {
			if (strncmp(job_env[j], name, nl) == 0 && job_env[j][nl] == '=') {
				sq_buf_addf(&csv, "%s%s", csv.len ? "," : "", name);
				break;
			}
		}
	}
	if (csv.len == 0) {
		sq_buf_release(&csv);
		return NULL;
	}
	return sq_buf_take(&csv);
}

/* The conf file's mounts: the batch script, then --container-mounts (PMIx's directories
 * are bound into each step's namespace: pmix.h). 0 ok, -1 (error kept). */
static int conf_mounts(const struct sq_conf_input *in, const char *cwd, char ***mount_lines,
		       size_t *nm)
{
	struct sq_mount_list mounts = { 0 };
	char err[SQ_ERR_LEN], bind[PATH_MAX * 2 + 8];

	if (in->batch_script != NULL) {
		/* The batch script lives in slurmd's spool directory on the host: bind it
		 * read-only at the same path so Slurm can exec it inside the container. */
		char msg[SQ_ERR_LEN];
		snprintf(bind, sizeof(bind), "%s:%s:ro", in->batch_script, in->batch_script);
		if (sq_mounts_parse(bind, NULL, &mounts, err, sizeof(err)) < 0) {
			sq_errf(msg, sizeof(msg), "cannot bind the batch script: %s", err);
			return sq_report_fail(msg);
		}
		for (size_t i = 0; i < mounts.count; i++)
			sq_strv_push(mount_lines, nm, mounts.items[i].fstab);
		sq_mounts_free(&mounts);
	}
	if (in->opt->mounts != NULL) {
		if (sq_mounts_parse(in->opt->mounts, cwd, &mounts, err, sizeof(err)) < 0 ||
		    sq_mounts_check_sources(&mounts, err, sizeof(err)) < 0) {
			sq_mounts_free(&mounts);
			return sq_report_fail(err);
		}
		for (size_t i = 0; i < mounts.count; i++) {
			/* A squashfs file is a dataset, mounted in the step's namespace once the
			 * container is ready (datasets.h); the rest as Pyxis binds them. */
			const struct sq_mount *m = &mounts.items[i];
			int r = sq_dataset_check(m, err, sizeof(err));
			if (r == 1)
				r = sq_datasets_add(in->datasets, m->source, m->target, err,
						    sizeof(err));
			else if (r == 0)
				sq_strv_push(mount_lines, nm, m->fstab);
			if (r < 0) {
				sq_mounts_free(&mounts);
				return sq_report_fail(err);
			}
		}
		sq_mounts_free(&mounts);
	}
	return 0;
}

/* The EFA plan's environment, mounts and hook (efa.h). 0 ok, -1 (error kept). */
static int conf_efa(const struct sq_conf_input *in, char *const job_env[], char ***env_lines, size_t *ne,
		    char ***mount_lines, size_t *nm, char ***hook_argv)
{
	struct sq_efa_roots roots = { in->cfg->efa_sysfs_root, in->cfg->efa_dev_root,
				      in->cfg->efa_opt_root };
	struct sq_efa_request req;
	struct sq_efa_plan plan;
	struct sq_efa_node node;
	char err[SQ_ERR_LEN], *user_set;
	int rv = -1;

	memset(&req, 0, sizeof(req));
	req.mode = in->opt->efa != SQ_EFA_SETTING_UNSET ? in->opt->efa : in->cfg->efa;
	req.nccl_debug = in->opt->nccl_debug;
	user_set = efa_user_set(job_env);
	req.user_set = user_set;
	if (sq_efa_detect(&roots, &node, err, sizeof(err)) < 0 ||
	    sq_efa_plan(&node, NULL, &req, &plan, err, sizeof(err)) < 0) {
		sq_report_fail(err);
		goto fail;
	}
	sq_strv_push_lines(env_lines, ne, plan.env);
	sq_strv_push_lines(mount_lines, nm, plan.fstab);
	if (plan.warnings && plan.warnings[0])
		sq_report_warn(plan.warnings);
	if (plan.active)
		*hook_argv = sq_efa_hook_argv(SQ_LIBEXEC_DIR "/squall-efa-hook", &roots, &req);
	sq_efa_plan_free(&plan);
	rv = 0;
fail:
	free(user_set);
	return rv;
}

/* Fill the conf file's parts: --container-env values, EFA environment and hook, mounts,
 * and Pyxis's entrypoint skip (rc.local). 0 ok, -1 (error kept). */
static int build_conf(const struct sq_conf_input *in, char *const job_env[], const char *cwd,
		      struct sq_conf_spec *spec, char ***env_lines, char ***mount_lines,
		      char ***hook_argv)
{
	char err[SQ_ERR_LEN], **keep = NULL;
	size_t ne = 0, nm = 0;

	if (conf_mounts(in, cwd, mount_lines, &nm) < 0)
		return -1;
	/* --container-env: the entrypoint and the runtime's hooks see the host's values. */
	if (sq_env_keep_lines(job_env, in->opt->env, &keep, err, sizeof(err)) < 0)
		return sq_report_fail(err);
	for (size_t i = 0; keep[i] != NULL; i++)
		sq_strv_push(env_lines, &ne, keep[i]);
	sq_env_free(keep);
	if (conf_efa(in, job_env, env_lines, &ne, mount_lines, &nm, hook_argv) < 0)
		return -1;

	spec->env = ne ? (const char *const *)*env_lines : NULL;
	spec->mounts = nm ? (const char *const *)*mount_lines : NULL;
	spec->hook_argv = (const char *const *)*hook_argv;
	/* Without --container-entrypoint, as Pyxis: the image's /etc/rc runs (its `cd
	 * WORKDIR` too) and only the entrypoint is skipped, through rc.local. */
	spec->skip_entrypoint = (in->opt->entrypoint >= 0 ? in->opt->entrypoint
							   : in->cfg->execute_entrypoint) == 0;
	return 0;
}

int sq_stepconf_make(const struct sq_conf_input *in, char *const job_env[], const char *cwd,
		     const char *path)
{
	struct sq_conf_spec spec = { 0 };
	char **env_lines = NULL, **mount_lines = NULL, **hook_argv = NULL, err[SQ_ERR_LEN];
	int rv = -1;

	if (build_conf(in, job_env, cwd, &spec, &env_lines, &mount_lines, &hook_argv) < 0)
		goto fail;
	unlink(path);  /* a leftover of a killed slurmstepd with the same ids */
	if (sq_stepconf_write(path, &spec, err, sizeof(err)) < 0) {
		sq_report_fail(err);
		goto fail;
	}
	rv = 0;
fail:
	sq_strv_free(env_lines);
	sq_strv_free(mount_lines);
	sq_efa_argv_free(hook_argv);
	return rv;
}
