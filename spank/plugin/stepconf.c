/* stepconf.c: see stepconf.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"
#include "quote.h"
#include "stepconf.h"

int sq_line_append(char ***arr, size_t *n, const char *line)
{
	char **grown = realloc(*arr, (*n + 2) * sizeof(char *));

	if (grown == NULL)
		return -1;
	*arr = grown;
	grown[*n] = strdup(line);
	if (grown[*n] == NULL) {
		grown[*n] = NULL;
		return -1;
	}
	grown[++*n] = NULL;
	return 0;
}

int sq_lines_append(char ***arr, size_t *n, const char *text)
{
	const char *p = text;

	while (p != NULL && *p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len > 0) {
			char *line = strndup(p, len);
			int rc = line ? sq_line_append(arr, n, line) : -1;
			free(line);
			if (rc < 0)
				return -1;
		}
		p = nl ? nl + 1 : NULL;
	}
	if (*arr == NULL) {
		*arr = calloc(1, sizeof(char *));
		return *arr ? 0 : -1;
	}
	return 0;
}

void sq_lines_free(char **arr)
{
	for (size_t i = 0; arr != NULL && arr[i] != NULL; i++)
		free(arr[i]);
	free(arr);
}

static int add_setting(char ***env, size_t *n, const char *key, int value)
{
	char line[128];

	if (value < 0)
		return 0;
	snprintf(line, sizeof(line), "%s=%s", key, value ? "y" : "n");
	return sq_line_append(env, n, line);
}

int sq_stepconf_env(char *const job_env[], const struct sq_opts *o, const char *runtime_dir,
		    char ***out, char *err, size_t errlen)
{
	char **clean = NULL, *line = NULL;
	size_t n = 0;

	*out = NULL;
	if (sq_env_clean(job_env, &clean, err, errlen) < 0)
		return -1;
	while (clean[n] != NULL)
		n++;
	if (asprintf(&line, "ENROOT_RUNTIME_PATH=%s/enroot", runtime_dir) < 0 ||
	    sq_line_append(&clean, &n, line) < 0 ||
	    add_setting(&clean, &n, "ENROOT_MOUNT_HOME", o->mount_home) < 0 ||
	    add_setting(&clean, &n, "ENROOT_REMAP_ROOT", o->remap_root) < 0 ||
	    add_setting(&clean, &n, "ENROOT_ROOTFS_WRITABLE", o->writable) < 0) {
		free(line);
		sq_env_free(clean);
		snprintf(err, errlen, "out of memory building the runtime's environment");
		return -1;
	}
	free(line);
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
	if (fd < 0) {
		snprintf(err, errlen, "cannot create the runtime's file %s: %s", path,
			 strerror(errno));
		return -1;
	}
	len = strlen(text);
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
			close(fd);
			unlink(path);
			return -1;
		}
		off += (size_t)w;
	}
	if (close(fd) < 0) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
		unlink(path);
		return -1;
	}
	return 0;
}
