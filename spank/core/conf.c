/* conf.c: compose the bash file for `enroot start --conf`, every value single-quoted. */
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "quote.h"
#include "strbuf.h"

/* Append WORD (quoted) to b. */
static int add_word(struct sq_buf *b, const char *s, char *err, size_t errlen)
{
	char *q;

	if (sq_shell_quote(s, strlen(s), &q, err, errlen) != 0)
		return -1;
	sq_buf_add(b, q);
	sq_str_free(q);
	return 0;
}

static int check_line(const char *fn, size_t i, const char *s, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];

	if (strchr(s, '\n') != NULL || strchr(s, '\r') != NULL)
		return sq_errf(err, errlen, "enroot conf %s(): entry %zu '%s' holds a newline (the "
			       "runtime reads one entry per line; remove it)", fn, i,
			       sq_show(s, show, sizeof(show)));
	if (*s == '\0')
		return sq_errf(err, errlen, "enroot conf %s(): entry %zu is empty (drop it)", fn, i);
	return 0;
}

static int render_environ(struct sq_buf *b, const char *const *env, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	const char *eq;
	size_t i;

	if (env[0] == NULL) {
		sq_buf_add(b, "environ() {\n\t:\n}\n");    /* nothing to print */
		return 0;
	}
	sq_buf_add(b, "environ() {\n\tprintf '%s\\n'");
	for (i = 0; env[i] != NULL; i++) {
		if (check_line("environ", i, env[i], err, errlen) != 0)
			return -1;
		eq = strchr(env[i], '=');
		if (eq == NULL || !sq_is_identifier(env[i], (size_t)(eq - env[i])))
			return sq_errf(err, errlen, "enroot conf environ(): entry %zu '%s' is not "
				       "KEY=VALUE with KEY a variable name", i,
				       sq_show(env[i], show, sizeof(show)));
		if (strncmp(env[i], "ENROOT_", 7) == 0)
			return sq_errf(err, errlen, "enroot conf environ(): entry %zu '%s': ENROOT_* "
				       "variables are dropped by the runtime (set them in its "
				       "environment instead)", i, sq_show(env[i], show, sizeof(show)));
		sq_buf_addc(b, ' ');
		if (add_word(b, env[i], err, errlen) != 0)
			return -1;
	}
	sq_buf_add(b, "\n}\n");
	return 0;
}

static int render_mounts(struct sq_buf *b, const char *const *mounts, char *err, size_t errlen)
{
	size_t i;

	if (mounts[0] == NULL) {
		sq_buf_add(b, "mounts() {\n\t:\n}\n");    /* nothing to print */
		return 0;
	}
	sq_buf_add(b, "mounts() {\n\tprintf '%s\\n'");
	for (i = 0; mounts[i] != NULL; i++) {
		if (check_line("mounts", i, mounts[i], err, errlen) != 0)
			return -1;
		sq_buf_addc(b, ' ');
		if (add_word(b, mounts[i], err, errlen) != 0)
			return -1;
	}
	sq_buf_add(b, "\n}\n");
	return 0;
}

/* Fixed text, nothing from the user: rc.local replaced by `exec "$@"` (see conf.h). */
#define SKIP_ENTRYPOINT \
	"\tif [ -d \"${ENROOT_ROOTFS}/etc\" ]; then\n" \
	"\t\trm -f \"${ENROOT_ROOTFS}/etc/rc.local\"\n" \
	"\t\tprintf '%s\\n' 'exec \"$@\"' > \"${ENROOT_ROOTFS}/etc/rc.local\"\n" \
	"\tfi\n"

static int render_hooks(struct sq_buf *b, const char *const *argv, int skip_entrypoint,
			char *err, size_t errlen)
{
	size_t i;

	if (argv != NULL && (argv[0] == NULL || argv[0][0] == '\0'))
		return sq_errf(err, errlen, "enroot conf hooks(): no command (give the hook's path "
			       "as argv[0])");
	sq_buf_add(b, "hooks() {\n");
	if (skip_entrypoint)
		sq_buf_add(b, SKIP_ENTRYPOINT);
	if (argv == NULL) {
		sq_buf_add(b, "}\n");
		return 0;
	}
	sq_buf_addc(b, '\t');
	for (i = 0; argv[i] != NULL; i++) {
		if (i > 0)
			sq_buf_addc(b, ' ');
		if (add_word(b, argv[i], err, errlen) != 0)
			return -1;
	}
	sq_buf_add(b, "\n}\n");
	return 0;
}

int sq_conf_render(const struct sq_conf_spec *spec, char **out, char *err, size_t errlen)
{
	struct sq_buf b;

	*out = NULL;
	sq_buf_init(&b);
	sq_buf_add(&b, "# enroot start --conf file written by squall; every value is quoted.\n");
	if ((spec->env != NULL && render_environ(&b, spec->env, err, errlen) != 0) ||
	    (spec->mounts != NULL && render_mounts(&b, spec->mounts, err, errlen) != 0) ||
	    ((spec->hook_argv != NULL || spec->skip_entrypoint) &&
	     render_hooks(&b, spec->hook_argv, spec->skip_entrypoint, err, errlen) != 0)) {
		sq_buf_release(&b);
		return -1;
	}
	*out = sq_buf_take(&b);
	if (*out == NULL)
		return sq_errf(err, errlen, "enroot conf: out of memory");
	return 0;
}
