/* hooktext.c: see hooktext.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "env.h"
#include "hooktext.h"
#include "safeopen.h"
#include "strbuf.h"

#define HOOK_MAX (1 << 20)     /* a larger "hook" is not read: nothing is left out */

struct text {
	struct sq_buf b;
	int failed;
};

/* s's n bytes and a newline. */
static void append(struct text *t, const char *s, size_t n)
{
	sq_buf_addn(&t->b, s, n);
	sq_buf_addc(&t->b, '\n');
}

/* One hook file (relative to dfd), never blocking and never through a FIFO. */
static void read_hook(struct text *t, int dfd, const char *name)
{
	unsigned int mode = 0;
	int fd = sq_open_regular(dfd, name, 0, &mode);
	char *buf = NULL;
	struct stat st;
	ssize_t got;

	if (fd < 0) {
		/* Not a regular file, or a dangling link: Enroot does not run it either. */
		if (errno != EINVAL && errno != ENOENT)
			t->failed = 1;
		return;
	}
	if (fstat(fd, &st) < 0 || st.st_size > HOOK_MAX ||
	    (buf = malloc((size_t)st.st_size + 1)) == NULL) {
		t->failed = 1;
	} else if ((st.st_mode & 0111) != 0) {
		got = read(fd, buf, (size_t)st.st_size);
		if (got != st.st_size)
			t->failed = 1;
		else
			append(t, buf, (size_t)got);
	}
	free(buf);
	close(fd);
}

static void read_dir(struct text *t, const char *base, const char *sub)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *e;
	int dfd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", base, sub) >= sizeof(path)) {
		t->failed = 1;
		return;
	}
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			t->failed = 1;
		return;
	}
	if ((d = fdopendir(dfd)) == NULL) {
		close(dfd);
		t->failed = 1;
		return;
	}
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);
		if (n > 3 && strcmp(e->d_name + n - 3, ".sh") == 0)
			read_hook(t, dfd, e->d_name);
	}
	closedir(d);
}

/* enroot.conf may set the hook directories itself: then they are not known here. */
static int conf_moves_hooks(const char *sysconf)
{
	char path[PATH_MAX], line[512];
	int fd, moved = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/enroot.conf", sysconf);
	if ((fd = sq_open_regular(AT_FDCWD, path, 0, NULL)) < 0)
		return errno != ENOENT;
	if ((f = fdopen(fd, "r")) == NULL) {
		close(fd);
		return 1;
	}
	while (!moved && fgets(line, sizeof(line), f) != NULL) {
		const char *p = line + strspn(line, " \t");
		moved = strncmp(p, "ENROOT_CONFIG_PATH", 18) == 0 ||
			strncmp(p, "ENROOT_SYSCONF_PATH", 19) == 0;
	}
	fclose(f);
	return moved;
}

char *sq_hooks_text(char *const env[])
{
	const char *sysconf = sq_env_value(env, "ENROOT_SYSCONF_PATH");
	const char *config = sq_env_value(env, "ENROOT_CONFIG_PATH");
	const char *xdg = sq_env_value(env, "XDG_CONFIG_HOME"), *home = sq_env_value(env, "HOME");
	char user[PATH_MAX];
	struct text t = { { NULL, 0, 0, 0 }, 0 };

	if (sysconf == NULL || *sysconf == '\0')
		sysconf = "/etc/enroot";
	if (config == NULL || *config == '\0') {
		if (xdg != NULL && *xdg != '\0')
			snprintf(user, sizeof(user), "%s/enroot", xdg);
		else if (home != NULL && *home != '\0')
			snprintf(user, sizeof(user), "%s/.config/enroot", home);
		else
			user[0] = '\0';
		config = user;
	}
	if (conf_moves_hooks(sysconf))
		return NULL;
	sq_buf_init(&t.b);
	append(&t, "", 0);
	read_dir(&t, sysconf, "hooks.d");
	if (*config != '\0')
		read_dir(&t, config, "hooks.d");
	if (t.failed || t.b.oom) {
		sq_buf_release(&t.b);
		return NULL;
	}
	return sq_buf_take(&t.b);
}
