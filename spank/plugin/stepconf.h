/*
 * stepconf.h: what one step hands to the runtime -- its environment and its --conf file.
 *
 * Environment: the job's, cleaned by the core's deny list (env.h; the job's own ENROOT_*
 * settings pass, except the site's paths and import settings), with the ENROOT_* settings
 * the flags ask for set over them (only those given: otherwise the job's value or the
 * site's enroot.conf rules), and a fixed PATH: the runtime's own directory, then
 * slurmstepd's PATH (as Pyxis runs Enroot), never the job's, because Enroot finds its
 * helpers (enroot-mount, enroot-nsenter, squashfuse, ...) through PATH; a conda, module or
 * image PATH in the job would break or change the runtime. The tasks get the image's PATH,
 * or Enroot's login default (docs/plugin.md).
 * ENROOT_RUNTIME_PATH is RUNTIME_DIR/enroot: a runtime may mount over it inside its
 * namespace, so the conf file lives beside it, in RUNTIME_DIR.
 * Conf file: rendered by the core (conf.h), written by the job user with O_EXCL mode
 * 0600 into the per-user runtime directory, removed once the container has started.
 */
#ifndef SQUALL_PLUGIN_STEPCONF_H
#define SQUALL_PLUGIN_STEPCONF_H

#include <stddef.h>

#include "conf.h"
#include "config.h"
#include "datasets.h"
#include "options.h"

/* What the step's --conf file is made from. */
struct sq_conf_input {
	const struct sq_config *cfg;   /* plugstack.conf */
	const struct sq_opts *opt;     /* the user's flags */
	const char *batch_script;      /* the batch step's script, bound read-only; or NULL */
	struct sq_datasets *datasets;  /* out: --container-mounts' squashfs files (datasets.h),
					* left out of the conf file */
};

/* The step's runtime: *enroot (heap; plugstack.conf's enroot=, else found on PATH) and
 * *runtime_env (sq_stepconf_env), RUNTIME_DIR/enroot made. 0 ok; -1 (error kept,
 * report.h). */
int sq_stepconf_runtime(const struct sq_config *cfg, const struct sq_opts *opt,
			char *const job_env[], const char *runtime_dir, char **enroot,
			char ***runtime_env);

/* The step's --conf file at path (replacing a leftover): --container-env values, the EFA
 * plan's environment, mounts and hook, the batch script's bind,
 * --container-mounts, and Pyxis's entrypoint skip. 0 ok; -1 (error kept, report.h). */
int sq_stepconf_make(const struct sq_conf_input *in, char *const job_env[], const char *cwd,
		     const char *path);

/* *out: NULL-terminated heap array (free with sq_env_free). path: the runtime's PATH
 * (sq_runtime_path). */
int sq_stepconf_env(char *const job_env[], const struct sq_opts *o, const char *runtime_dir,
		    const char *path, char ***out, char *err, size_t errlen);

/* The PATH of a process that has none (the job prolog's): the standard one. */
#define SQ_STANDARD_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* The runtime's PATH into buf: the directory of `enroot` (symlinks resolved), then
 * slurmstepd's own PATH (or the standard one when it has none). 0 ok, -1 too long. */
int sq_runtime_path(const char *enroot, char *buf, size_t buflen);
/* The same over base instead of slurmstepd's PATH (the job prolog's start, prestart.h). */
int sq_runtime_path_from(const char *enroot, const char *base, char *buf, size_t buflen);

/* Find `enroot` on slurmstepd's PATH, as Pyxis runs it when plugstack.conf names no
 * enroot=: *out (heap) is its absolute path. 0 ok, -1 with err saying where it looked. */
int sq_find_enroot(char **out, char *err, size_t errlen);

/* Set KEY=VALUE in a NULL-terminated heap array, replacing an entry of that KEY. 0 ok. */
int sq_env_put(char ***env, const char *key, const char *value);

/* Write text to a new file at path (O_EXCL, mode 0600); removed again on error. */
int sq_stepfile_write(const char *path, const char *text, char *err, size_t errlen);

/* Render spec and write it to path, never over an existing file. */
int sq_stepconf_write(const char *path, const struct sq_conf_spec *spec, char *err, size_t errlen);

#endif
