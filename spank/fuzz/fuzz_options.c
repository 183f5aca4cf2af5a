/* fuzz_options: every --container-* flag value (sq_opt_check_value, sq_opt_set), the
 * flag-name lookup, --container-name modes, the efa/log settings, and the SQUALL_/PYXIS_
 * environment. Fields: FLAG-SELECTOR VALUE \0 ENV... */
#include <stdio.h>

#include "fuzz.h"
#include "options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_fields ff;
	struct sq_opts o;
	char err[512], warn[512], var[96], *name = NULL;
	char *envp[2 * SQ_OPT_COUNT + FZ_MAX_FIELDS + 1];
	size_t n = 0;
	int rc, mode, setting, id;
	const struct sq_flag *f;

	if (size < 1)
		return 0;
	fz_split(data + 1, size - 1, FZ_MAX_FIELDS, &ff);
	f = sq_opt_flag((size_t)(data[0] % SQ_OPT_COUNT));
	rc = sq_opt_check_value(f->name, ff.f[0], err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	rc = sq_opt_check_value(ff.f[0], ff.f[1], err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	(void)sq_opt_lookup(ff.f[0]);
	rc = sq_opt_parse_name(ff.f[0], &name, &mode, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	free(name);
	rc = sq_efa_setting_parse("efa", ff.f[0], &setting, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	rc = sq_log_setting_parse("log", ff.f[0], &setting, err, 8);
	fz_check_err(rc, err, 8);

	sq_opts_init(&o);
	for (int i = 1; i < ff.n; i++)
		envp[n++] = ff.f[i];
	/* the selected flag's two variables set to the value */
	for (id = 0; id < 2; id++) {
		char *line = malloc(ff.len[0] + 128);

		if (line == NULL)
			abort();
		sq_opt_env_name((int)(data[0] % SQ_OPT_COUNT), id ? "PYXIS_" : "SQUALL_", var,
				sizeof(var));
		snprintf(line, ff.len[0] + 128, "%s=%s", var, ff.f[0]);
		envp[n++] = line;
	}
	envp[n] = NULL;
	rc = sq_opts_load_environ(&o, envp, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	rc = sq_opts_check(&o, warn, sizeof(warn), err, sizeof(err));
	fz_check_err(rc < 0 ? -1 : 0, err, sizeof(err));
	rc = sq_opt_set(&o, (int)(data[0] % SQ_OPT_COUNT), ff.f[0], SQ_SRC_CLI, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	rc = sq_opt_set_by_name(&o, f->name, ff.f[1], SQ_SRC_CLI, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	rc = sq_opts_check(&o, warn, sizeof(warn), err, sizeof(err));
	fz_check_err(rc < 0 ? -1 : 0, err, sizeof(err));
	sq_opts_free(&o);
	free(envp[n - 1]);
	free(envp[n - 2]);
	fz_free(&ff);
	return 0;
}
