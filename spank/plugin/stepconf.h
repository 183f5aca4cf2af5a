/*
 * stepconf.h: what one step hands to the runtime -- its environment and its --conf file.
 *
 * Environment: the job's, cleaned by the core's deny list (env.h), plus the ENROOT_*
 * settings the flags ask for (only those given: otherwise the site's enroot.conf rules).
 * ENROOT_RUNTIME_PATH is RUNTIME_DIR/enroot: a runtime may mount over it inside its
 * namespace, so the conf file lives beside it, in RUNTIME_DIR.
 * Conf file: rendered by the core (conf.h), written by the job user with O_EXCL mode
 * 0600 into the per-user runtime directory, removed once the container has started.
 */
#ifndef SQUALL_PLUGIN_STEPCONF_H
#define SQUALL_PLUGIN_STEPCONF_H

#include <stddef.h>

#include "conf.h"
#include "options.h"

/* *out: NULL-terminated heap array (free with sq_env_free). */
int sq_stepconf_env(char *const job_env[], const struct sq_opts *o, const char *runtime_dir,
		    char ***out, char *err, size_t errlen);

/* Write text to a new file at path (O_EXCL, mode 0600); removed again on error. */
int sq_stepfile_write(const char *path, const char *text, char *err, size_t errlen);

/* Render spec and write it to path, never over an existing file. */
int sq_stepconf_write(const char *path, const struct sq_conf_spec *spec, char *err, size_t errlen);

/* Split "A\nB\n" into a NULL-terminated heap array of heap strings appended to *arr
 * (which may be NULL); *n is its length. */
int sq_lines_append(char ***arr, size_t *n, const char *text);
int sq_line_append(char ***arr, size_t *n, const char *line);
void sq_lines_free(char **arr);

#endif
