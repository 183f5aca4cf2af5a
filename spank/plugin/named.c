/* named.c: see named.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "named.h"
#include "options.h"
#include "running.h"

/* Names from `enroot list`, one per line, that start with prefix: a heap copy of the
 * listing with matching lines kept, separated by '\n'. */
static int list_prefixed(const struct sq_runtime *rt, const char *prefix, char ***names,
			 size_t *count, char *err, size_t errlen)
{
	const char *args[] = { "list", NULL };
	char *text = NULL, *save = NULL, *line;
	size_t plen = strlen(prefix);

	*names = NULL;
	*count = 0;
	if (sq_enroot_call(rt, "enroot list", args, &text, err, errlen) < 0)
		return -1;
	for (line = text ? strtok_r(text, "\n", &save) : NULL; line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		char **grown;
		line[strcspn(line, " \t\r")] = '\0';
		if (strncmp(line, prefix, plen) != 0)
			continue;
		grown = realloc(*names, (*count + 1) * sizeof(char *));
		if (grown == NULL)
			break;
		*names = grown;
		(*names)[(*count)++] = strdup(line);
	}
	free(text);
	return 0;
}

static void free_names(char **names, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

int sq_named_create(const struct sq_runtime *rt, const char *name, const char *image,
		    char *err, size_t errlen)
{
	const char *args[] = { "create", "-n", name, image, NULL };
	return sq_enroot_call(rt, "enroot create", args, NULL, err, errlen);
}

int sq_named_remove(const struct sq_runtime *rt, const char *name, char *err, size_t errlen)
{
	const char *args[] = { "remove", "-f", name, NULL };
	return sq_enroot_call(rt, "enroot remove", args, NULL, err, errlen);
}

int sq_named_prepare(const struct sq_runtime *rt, const char *scope, const char *name, int mode,
		     const char *image_text, const char *image_path, const char *identity,
		     char **target, char *err, size_t errlen)
{
	char prefix[256], wanted[300], sub[512];
	char **names = NULL;
	size_t count = 0, same = 0;
	int rc = -1;

	*target = NULL;
	snprintf(prefix, sizeof(prefix), "squall@%s@%s@", scope, name);
	if (list_prefixed(rt, prefix, &names, &count, sub, sizeof(sub)) < 0) {
		snprintf(err, errlen, "--container-name=%s: %s", name, sub);
		return -1;
	}
	if (identity == NULL) {
		/* No image: reuse the one container of that name as it is. */
		if (count == 0)
			snprintf(err, errlen, "--container-name=%s: no such container on this node, "
				 "and no --container-image to create it from: add --container-image",
				 name);
		else if ((*target = strdup(names[0])) != NULL)
			rc = 0;
		goto out;
	}
	snprintf(wanted, sizeof(wanted), "%s%s", prefix, identity);
	for (size_t i = 0; i < count; i++)
		same += strcmp(names[i], wanted) == 0;
	if (same && mode == SQ_NAME_CREATE) {
		snprintf(err, errlen, "--container-name=%s:create: the container already exists: "
			 "drop ':create' to reuse it, or pick another name", name);
		goto out;
	}
	if (!same && count > 0) {
		if (mode != SQ_NAME_CREATE) {
			snprintf(err, errlen, "--container-name=%s: the container was made from a "
				 "different image than --container-image=%s (the image changed): use "
				 "--container-name=%s:create to replace it, or pick another name",
				 name, image_text, name);
			goto out;
		}
		for (size_t i = 0; i < count; i++)
			if (sq_named_remove(rt, names[i], sub, sizeof(sub)) < 0) {
				snprintf(err, errlen, "--container-name=%s:create: cannot remove the "
					 "old container: %s", name, sub);
				goto out;
			}
	}
	if (!same && sq_named_create(rt, wanted, image_path, sub, sizeof(sub)) < 0) {
		snprintf(err, errlen, "--container-name=%s: %s", name, sub);
		goto out;
	}
	if ((*target = strdup(wanted)) != NULL)
		rc = 0;
out:
	free_names(names, count);
	return rc;
}

void sq_named_exec_none(const char *name, char *err, size_t errlen)
{
	snprintf(err, errlen, "--container-name=%s:exec: no container of that name runs on this "
		 "node: start it in another step first (e.g. srun --container-name=%s "
		 "--container-image=IMAGE sleep infinity &), or drop ':exec' to start one here",
		 name, name);
}

int sq_named_find_running(const char *runtime_dir, const char *scope, const char *name,
			  int mode, const char *image_text, const char *identity, char **running,
			  pid_t *pid, unsigned long long *starttime, char *err, size_t errlen)
{
	char prefix[256], wanted[300];
	char **names;
	int other = 0, rc = 0;

	*running = NULL;
	if (mode != SQ_NAME_AUTO && mode != SQ_NAME_EXEC)
		return 0;
	snprintf(prefix, sizeof(prefix), "squall@%s@%s@", scope, name);
	snprintf(wanted, sizeof(wanted), "%s%s", prefix, identity ? identity : "");
	names = sq_running_names(runtime_dir, prefix);
	for (size_t i = 0; names != NULL && names[i] != NULL; i++) {
		pid_t p;
		unsigned long long t;

		if (identity != NULL && strcmp(names[i], wanted) != 0) {
			other |= sq_running_live(runtime_dir, names[i]);
			continue;
		}
		if (sq_running_read(runtime_dir, names[i], &p, &t) < 0)
			continue;
		if ((*running = strdup(names[i])) == NULL)
			break;
		*pid = p;
		*starttime = t;
		rc = 1;
		break;
	}
	sq_running_names_free(names);
	if (rc == 0 && mode == SQ_NAME_EXEC) {
		if (other)
			snprintf(err, errlen, "--container-name=%s:exec: the container running on "
				 "this node was made from a different image than "
				 "--container-image=%s: drop --container-image to join it as it is",
				 name, image_text);
		else
			sq_named_exec_none(name, err, errlen);
		rc = -1;
	}
	return rc;
}

int sq_named_remove_prefix(const struct sq_runtime *rt, const char *prefix, char *err, size_t errlen)
{
	char **names = NULL;
	size_t count = 0;
	int removed = 0;

	if (list_prefixed(rt, prefix, &names, &count, err, errlen) < 0)
		return -1;
	for (size_t i = 0; i < count; i++)
		if (sq_named_remove(rt, names[i], err, errlen) == 0)
			removed++;
	free_names(names, count);
	return removed;
}
