/* stepconf.c: see stepconf.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"
#include "quote.h"
#include "stepconf.h"
#include "strbuf.h"

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

#define STANDARD_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
	if (sq_line_append(env, &n, line) < 0) {
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
	char real[PATH_MAX], *slash;
	int n;

	if (stepd == NULL || *stepd == '\0')
		stepd = STANDARD_PATH;
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
		path = STANDARD_PATH;
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
