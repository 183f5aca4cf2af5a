/* builder.c: see builder.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder.h"
#include "safeopen.h"
#include "strbuf.h"

#define NAME_MAX_LEN 32   /* useradd's limit */

/* One line about a bad file, which is then treated as absent. Returns 1 (the default). */
static int bad_conf(const char *conf, const char *what, char *note, size_t notelen)
{
	snprintf(note, notelen, "squall: warning: %s %s: using the default builder account %s; "
		 "make it a regular file of root's, writable only by root, naming the builder "
		 "account (or none)", conf, what, SQ_BUILDER_DEFAULT);
	return 1;
}

/* Open conf as a root-owned regular file only writable by root; -1 with note (or with
 * note "" when it does not exist). */
static int open_conf(const char *conf, char *note, size_t notelen)
{
	char what[128];
	unsigned int mode;
	struct stat st;
	int fd = sq_open_regular(AT_FDCWD, conf, SQ_OPEN_NOFOLLOW, &mode);

	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return -1;
		if (errno == EINVAL)
			snprintf(what, sizeof(what), "is %s, not a regular file",
				 sq_file_kind(mode));
		else
			snprintf(what, sizeof(what), "cannot be read (%s)", strerror(errno));
		bad_conf(conf, what, note, notelen);
		return -1;
	}
	if (fstat(fd, &st) < 0 || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(what, sizeof(what), "is not root's alone (owner uid %u, mode %04o)",
			 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		bad_conf(conf, what, note, notelen);
		close(fd);
		return -1;
	}
	if (st.st_size > SQ_BUILDER_CONF_MAX) {
		snprintf(what, sizeof(what), "is larger than %d bytes", SQ_BUILDER_CONF_MAX);
		bad_conf(conf, what, note, notelen);
		close(fd);
		return -1;
	}
	return fd;
}

/* The first word of the first line that is neither blank nor a comment, or NULL. */
static char *first_word(char *text)
{
	for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		line += strspn(line, " \t\r");
		if (*line == '\0' || *line == '#')
			continue;
		line[strcspn(line, " \t\r")] = '\0';
		return line;
	}
	return NULL;
}

static int valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > NAME_MAX_LEN || s[0] == '-')
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
	       == n;
}

int sq_builder_name(const char *conf, char *name, size_t namelen, char *note,
		    size_t notelen)
{
	char text[SQ_BUILDER_CONF_MAX + 1], shown[SQ_SHOW_MAX], what[SQ_SHOW_MAX + 64];
	ssize_t got;
	char *word;
	int fd;

	conf = conf ? conf : SQ_BUILDER_CONF;
	note[0] = '\0';
	snprintf(name, namelen, "%s", SQ_BUILDER_DEFAULT);
	fd = open_conf(conf, note, notelen);
	if (fd < 0)
		return 1;
	got = read(fd, text, SQ_BUILDER_CONF_MAX);
	close(fd);
	if (got < 0)
		return bad_conf(conf, "cannot be read", note, notelen);
	text[got] = '\0';
	if (memchr(text, '\0', (size_t)got) != NULL)
		return bad_conf(conf, "holds a NUL byte", note, notelen);
	word = first_word(text);
	if (word == NULL)
		return 1;
	if (strcmp(word, "none") == 0)
		return 0;
	if (!valid_name(word)) {
		snprintf(what, sizeof(what), "names no valid account (\"%s\")",
			 sq_show(word, shown, sizeof(shown)));
		return bad_conf(conf, what, note, notelen);
	}
	snprintf(name, namelen, "%s", word);
	return 1;
}

/* The environment from nothing: only what the builder's own account says. */
static void make_env(struct sq_builder *b, const char *home)
{
	snprintf(b->env_path, sizeof(b->env_path), "PATH=%s", SQ_BUILDER_PATH);
	snprintf(b->env_home, sizeof(b->env_home), "HOME=%s", home[0] ? home : "/");
	snprintf(b->env_user, sizeof(b->env_user), "USER=%s", b->name);
	snprintf(b->env_logname, sizeof(b->env_logname), "LOGNAME=%s", b->name);
	b->envp[0] = b->env_path;
	b->envp[1] = b->env_home;
	b->envp[2] = b->env_user;
	b->envp[3] = b->env_logname;
	b->envp[4] = (char *)"LANG=C.UTF-8";
	b->envp[5] = NULL;
}

int sq_builder_lookup(const char *name, struct sq_builder *b, char *note, size_t notelen)
{
	struct passwd pw, *res = NULL;
	char buf[16384];

	memset(b, 0, sizeof(*b));
	note[0] = '\0';
	if (strlen(name) >= sizeof(b->name) ||
	    getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || res == NULL)
		return 0;
	if (pw.pw_uid == 0 || pw.pw_gid == 0) {
		snprintf(note, notelen, "squall: warning: the image builder %s is root's uid or "
			 "gid: not used (images are built as you); name a dedicated account in %s",
			 name, SQ_BUILDER_CONF);
		return 0;
	}
	snprintf(b->name, sizeof(b->name), "%s", name);
	b->cred.uid = pw.pw_uid;
	b->cred.gid = pw.pw_gid;
	if (sq_cred_groups(&b->cred, name) < 0) {
		snprintf(note, notelen, "squall: warning: cannot list the groups of the image "
			 "builder %s: images are built as you", name);
		sq_builder_free(b);
		return 0;
	}
	make_env(b, pw.pw_dir ? pw.pw_dir : "/");
	return 1;
}

int sq_builder_find(const char *conf, struct sq_builder *b, char *note, size_t notelen)
{
	char name[64], why[512];

	memset(b, 0, sizeof(*b));
	if (sq_builder_name(conf, name, sizeof(name), note, notelen) == 0)
		return 0;
	if (sq_builder_lookup(name, b, why, sizeof(why)) == 1)
		return 1;
	if (why[0] != '\0') {
		size_t n = strlen(note);
		snprintf(note + n, notelen - n, "%s%s", n ? "\n" : "", why);
	}
	return 0;
}

void sq_builder_free(struct sq_builder *b)
{
	sq_cred_free(&b->cred);
}
