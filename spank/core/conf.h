/*
 * conf.h: the text of the bash file given to `enroot start --conf FILE`.
 *
 * Pure composition (the plugin writes the file). Every value is one single-quoted bash
 * word, so nothing in it is expanded when Enroot sources the file:
 *   environ() { printf '%s\n' 'KEY=VALUE' ...; }
 *   mounts()  { printf '%s\n' 'SRC DST TYPE OPTS' ...; }
 *   hooks()   { 'ARGV0' 'ARG1' ...; }             runs inside the new namespaces
 * Each function is emitted only when its input is given. With skip_entrypoint, hooks()
 * first overwrites ${ENROOT_ROOTFS}/etc/rc.local with `exec "$@"` (Pyxis's way to skip the
 * image's entrypoint: the image's /etc/rc, written by `enroot import`, still runs, so its
 * `cd WORKDIR` happens, then sources rc.local, which execs the command as given). A
 * symlink there is removed first, never written through; without /etc nothing is done. environ keys must be
 * identifiers and not ENROOT_*; environ values and fstab lines may not hold a newline
 * (the runtime reads them line by line); argv may not be empty. No rc(): Enroot runs the
 * body of rc() as the container's rc script, so the plugin passes its rc as a file
 * (`enroot start --rc FILE`) instead of composing code here. Note that Enroot
 * itself expands ${VAR} inside environ and fstab lines after reading them: callers
 * pass literal values (mounts.h already refuses '$').
 */
#ifndef SQUALL_CORE_CONF_H
#define SQUALL_CORE_CONF_H

#include <stddef.h>

struct sq_conf_spec {
	const char *const *env;       /* "KEY=VALUE" entries, NULL-terminated; NULL: no environ() */
	const char *const *mounts;    /* fstab lines, NULL-terminated; NULL: no mounts() */
	const char *const *hook_argv; /* command for hooks(), NULL-terminated; NULL: none */
	int skip_entrypoint;          /* 1: hooks() overwrites /etc/rc.local first */
};

/* Compose the file text into *out (heap, free with sq_str_free). 0 ok, -1 error naming
 * the function and the entry that was refused. */
int sq_conf_render(const struct sq_conf_spec *spec, char **out, char *err, size_t errlen);

#endif
