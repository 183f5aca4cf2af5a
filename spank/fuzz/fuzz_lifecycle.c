/* fuzz_lifecycle: the kept-container decision (sq_life_decide) from arbitrary field values,
 * and the container key (sq_life_key) over parts, a runtime environment and hooks' text.
 * Bytes 0-5: the decision's fields (signed); then PARTS... \0\0 ENV... (split at the first
 * empty field); the first part doubles as the hooks' text. */
#include "fuzz.h"
#include "lifecycle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sq_life_input in;
	struct sq_life_plan plan;
	struct fz_fields ff;
	const char *parts[FZ_MAX_FIELDS + 1];
	char *env[FZ_MAX_FIELDS + 1], key[33], key2[33];
	int np = 0, ne = 0, i;

	if (size < 6)
		return 0;
	in.reuse = (int8_t)data[0];
	in.flag = (int8_t)data[1];
	in.named = (int8_t)data[2];
	in.save = (int8_t)data[3];
	in.batch = (int8_t)data[4];
	in.entrypoint = (int8_t)data[5];
	if (sq_life_decide(&in, &plan) == 0 && plan.action != SQ_LIFE_START_STEP &&
	    plan.action != SQ_LIFE_KEPT)
		abort();
	if (plan.why == NULL)
		abort();
	fz_split(data + 6, size - 6, FZ_MAX_FIELDS, &ff);
	for (i = 0; i < ff.n && ff.len[i] > 0; i++)
		parts[np++] = ff.f[i];
	for (i++; i < ff.n; i++) {
		(void)sq_life_env_step_specific(ff.f[i]);
		(void)sq_life_env_task_shape(ff.f[i]);
		(void)sq_life_hooks_read(np > 0 ? parts[0] : "", ff.f[i]);
		env[ne++] = ff.f[i];
	}
	parts[np] = NULL;
	env[ne] = NULL;
	if (sq_life_key(parts, env, np > 0 ? parts[0] : NULL, key) != 0 || strlen(key) != 32)
		abort();
	/* the environment's order does not matter */
	for (i = 0; i < ne / 2; i++) {
		char *t = env[i];

		env[i] = env[ne - 1 - i];
		env[ne - 1 - i] = t;
	}
	if (sq_life_key(parts, env, np > 0 ? parts[0] : NULL, key2) != 0 ||
	    strcmp(key, key2) != 0)
		abort();
	fz_free(&ff);
	return 0;
}
