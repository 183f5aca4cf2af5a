/* named.c: see named.h. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "named.h"
#include "options.h"
#include "running.h"
#include "safeopen.h"
#include "smallio.h"
#include "strbuf.h"
#include "strv.h"

#define IMAGE_RECORD "image-"

int sq_named_runtime_name(int scope_job, uint32_t jobid, const char *name, char *buf,
			  size_t buflen)
{
	int n = scope_job ? snprintf(buf, buflen, "pyxis_%u_%s", (unsigned)jobid, name)
			  : snprintf(buf, buflen, "pyxis_%s", name);
	return n < 0 || (size_t)n >= buflen ? -1 : 0;
}

int sq_named_step_name(uint32_t jobid, uint32_t stepid, char *buf, size_t buflen)
{
	int n = snprintf(buf, buflen, "pyxis_%u.%u", (unsigned)jobid, (unsigned)stepid);
	return n < 0 || (size_t)n >= buflen ? -1 : 0;
}

int sq_named_is_step(const char *name, uint32_t *jobid, uint32_t *stepid)
{
	unsigned long long j = 0, s = 0;
	const char *p = name;
	int dj = 0, ds = 0;

	for (; isdigit((unsigned char)*p) && dj < 10; p++, dj++)
		j = j * 10 + (unsigned)(*p - '0');
	if (dj == 0 || *p++ != '.')
		return 0;
	for (; isdigit((unsigned char)*p) && ds < 10; p++, ds++)
		s = s * 10 + (unsigned)(*p - '0');
	if (ds == 0 || *p != '\0' || j > UINT32_MAX || s > UINT32_MAX)
		return 0;
	*jobid = (uint32_t)j;
	*stepid = (uint32_t)s;
	return 1;
}

/* Names from `enroot list` that start with prefix (exact when exact is set). */
static int list_names(const struct sq_runtime *rt, const char *prefix, int exact, char ***names,
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
		line[strcspn(line, " \t\r")] = '\0';
		if (strncmp(line, prefix, plen) != 0 || (exact && line[plen] != '\0'))
			continue;
		if (sq_strv_push(names, count, line) < 0)
			break;
	}
	free(text);
	return 0;
}

int sq_named_exists(const struct sq_runtime *rt, const char *runtime_name)
{
	char **names = NULL, err[SQ_ERR_LEN];
	size_t count = 0;

	if (list_names(rt, runtime_name, 1, &names, &count, err, sizeof(err)) < 0)
		return 0;
	sq_strv_free(names);
	return count > 0;
}

int sq_named_create(const struct sq_runtime *rt, const char *name, const char *image,
		    char *err, size_t errlen)
{
	const char *args[] = { "create", "-n", name, image, NULL };
	return sq_enroot_call(rt, "enroot create", args, NULL, err, errlen);
}

int sq_named_load(const struct sq_runtime *rt, const char *name, const char *uri, char *err,
		  size_t errlen)
{
	const char *args[] = { "load", "-n", name, uri, NULL };
	return sq_enroot_call(rt, "enroot load", args, NULL, err, errlen);
}

int sq_named_remove(const struct sq_runtime *rt, const char *name, char *err, size_t errlen)
{
	const char *args[] = { "remove", "-f", name, NULL };
	return sq_enroot_call(rt, "enroot remove", args, NULL, err, errlen);
}

static void record_path(char *buf, size_t len, const char *dir, const char *runtime_name)
{
	snprintf(buf, len, "%s/" IMAGE_RECORD "%s", dir, runtime_name);
}

int sq_named_record_image(const char *runtime_dir, const char *runtime_name,
			  const char *identity, const char *image_text, char *err, size_t errlen)
{
	char path[PATH_MAX];
	char *line = NULL;
	int rv = 0;

	record_path(path, sizeof(path), runtime_dir, runtime_name);
	if (asprintf(&line, "%s\t%s\n", identity, image_text) < 0)
		return sq_errf(err, errlen, "out of memory");
	if (sq_write_record(path, line) < 0)
		rv = sq_errf(err, errlen, "cannot record the image of container %s in %s: %s",
			     runtime_name, runtime_dir, strerror(errno));
	free(line);
	return rv;
}

/* The recorded image of runtime_name: 0 and *identity (17 bytes) + *text (heap), or -1. */
static int read_image(const char *runtime_dir, const char *runtime_name, char identity[17],
		      char **text)
{
	char path[PATH_MAX], buf[PATH_MAX + 64], *tab, *nl;
	ssize_t n;

	*text = NULL;
	record_path(path, sizeof(path), runtime_dir, runtime_name);
	n = sq_read_text(sq_open_regular(AT_FDCWD, path, SQ_OPEN_NOFOLLOW, NULL), buf,
			 sizeof(buf));
	if (n <= 18)
		return -1;
	tab = strchr(buf, '\t');
	nl = strchr(buf, '\n');
	if (tab == NULL || tab - buf != 16 || nl == NULL || nl < tab)
		return -1;
	*nl = '\0';
	memcpy(identity, buf, 16);
	identity[16] = '\0';
	*text = strdup(tab + 1);
	return *text ? 0 : -1;
}

/* Another image than the container was made from: "" when the same (or unknown), else a
 * warning or, strict, an error. Returns -1 for the error. */
static int compare_image(const char *runtime_dir, const char *runtime_name, const char *name,
			 int strict, const char *image_text, const char *identity, char *warn,
			 size_t warnlen, char *err, size_t errlen)
{
	char had[17];
	char *was = NULL;
	int rc = 0;

	if (identity == NULL || read_image(runtime_dir, runtime_name, had, &was) < 0)
		return 0;
	if (strcmp(had, identity) != 0) {
		if (strict) {
			sq_errf(err, errlen, "--container-name=%s: container %s was made from %s, "
				"not from --container-image=%s (container_name_strict=1): remove it "
				"with 'enroot remove -f %s', or pick another name", name,
				runtime_name, was, image_text, runtime_name);
			rc = -1;
		} else {
			snprintf(warn, warnlen, "squall: warning: --container-name=%s: reusing "
				 "container %s as it is: it was made from %s, not from "
				 "--container-image=%s ('enroot remove -f %s' to start afresh)",
				 name, runtime_name, was, image_text, runtime_name);
		}
	}
	free(was);
	return rc;
}

static int listed(char *const *names, size_t count, const char *name)
{
	for (size_t i = 0; i < count; i++)
		if (strcmp(names[i], name) == 0)
			return 1;
	return 0;
}

/* Drop the image records of containers the runtime no longer has (a user's `enroot remove`,
 * a site's epilog). Only regular files older than the listing: a record written since is a
 * container another step has just created. unlinkat never follows the name. */
static void sweep_records(const char *runtime_dir, char *const *names, size_t count,
			  time_t listed_at)
{
	int dfd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *e;
	struct stat st;

	if (d == NULL) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		const char *name = e->d_name + strlen(IMAGE_RECORD);
		if (strncmp(e->d_name, IMAGE_RECORD, strlen(IMAGE_RECORD)) != 0 || *name == '\0' ||
		    listed(names, count, name))
			continue;
		if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		    st.st_mtime < listed_at)
			unlinkat(dfd, e->d_name, 0);
	}
	closedir(d);
}

int sq_named_prepare(const struct sq_runtime *rt, const struct sq_named_query *q,
		     char **target, char *warn, size_t warnlen, char *err, size_t errlen)
{
	const char *runtime_dir = q->runtime_dir, *runtime_name = q->runtime_name;
	const char *name = q->name;
	const struct sq_named_image *img = &q->img;
	int mode = q->mode, strict = q->strict;
	char sub[1024];
	char **names = NULL;
	size_t count = 0;
	int rv = -1;
	time_t listed_at = time(NULL);

	*target = NULL;
	if (warnlen > 0)
		warn[0] = '\0';
	/* Every name: this one's existence, and the records to drop. */
	if (list_names(rt, "", 0, &names, &count, sub, sizeof(sub)) < 0) {
		sq_errf(err, errlen, "--container-name=%s: %s", name, sub);
		return -1;
	}
	sweep_records(runtime_dir, names, count, listed_at);
	if (listed(names, count, runtime_name)) {
		if (mode == SQ_NAME_CREATE) {
			sq_errf(err, errlen, "--container-name=%s:create: container %s already "
				"exists: drop ':create' to reuse it, or remove it with 'enroot "
				"remove -f %s'", name, runtime_name, runtime_name);
			goto fail;
		}
		if (compare_image(runtime_dir, runtime_name, name, strict, img->text, img->identity,
				  warn, warnlen, err, errlen) < 0)
			goto fail;
	} else if (img->identity == NULL) {
		sq_errf(err, errlen, "--container-name=%s: no container %s on this node, and no "
			"--container-image to create it from: add --container-image", name,
			runtime_name);
		goto fail;
	} else {
		int made = img->load_uri != NULL
			   ? sq_named_load(rt, runtime_name, img->load_uri, sub, sizeof(sub))
			   : sq_named_create(rt, runtime_name, img->path, sub, sizeof(sub));
		if (made < 0) {
			sq_errf(err, errlen, "--container-name=%s: %s", name, sub);
			goto fail;
		}
		if (sq_named_record_image(runtime_dir, runtime_name, img->identity, img->text, sub,
					  sizeof(sub)) < 0)
			snprintf(warn, warnlen, "squall: warning: %s", sub);
	}
	if ((*target = strdup(runtime_name)) != NULL)
		rv = 0;
	else
		sq_errf(err, errlen, "out of memory");
fail:
	sq_strv_free(names);
	return rv;
}

void sq_named_exec_none(const char *name, char *err, size_t errlen)
{
	sq_errf(err, errlen, "--container-name=%s:exec: no container of that name runs on this "
		"node: start it in another step first (e.g. srun --container-name=%s "
		"--container-image=IMAGE sleep infinity &), or drop ':exec' to start one here",
		name, name);
}

int sq_named_find_running(const struct sq_named_query *q, struct sq_named_found *found,
			  char *warn, size_t warnlen, char *err, size_t errlen)
{
	if (warnlen > 0)
		warn[0] = '\0';
	if (q->mode != SQ_NAME_AUTO && q->mode != SQ_NAME_EXEC)
		return 0;
	if (!sq_running_live(q->runtime_dir, q->runtime_name) ||
	    sq_running_read_ns(q->runtime_dir, q->runtime_name, &found->pid, &found->starttime,
			       &found->nspid, &found->nsstart) < 0) {
		if (q->mode == SQ_NAME_EXEC) {
			sq_named_exec_none(q->name, err, errlen);
			return -1;
		}
		return 0;
	}
	if (compare_image(q->runtime_dir, q->runtime_name, q->name, q->strict, q->img.text,
			  q->img.identity, warn, warnlen, err, errlen) < 0)
		return -1;
	return 1;
}

int sq_named_remove_prefix(const struct sq_runtime *rt, const char *runtime_dir,
			   const char *prefix, char *err, size_t errlen)
{
	char **names = NULL, path[PATH_MAX];
	size_t count = 0;
	int removed = 0;

	if (list_names(rt, prefix, 0, &names, &count, err, errlen) < 0)
		return -1;
	for (size_t i = 0; i < count; i++) {
		if (sq_named_remove(rt, names[i], err, errlen) == 0)
			removed++;
		record_path(path, sizeof(path), runtime_dir, names[i]);
		unlink(path);
	}
	sq_strv_free(names);
	return removed;
}
