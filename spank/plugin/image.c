/* image.c: see image.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "builder.h"
#include "filepolicy.h"
#include "imageref.h"
#include "image.h"
#include "pinmemo.h"
#include "safeopen.h"
#include "srunwatch.h"
#include "strbuf.h"

void sq_hash_hex(const char *s, size_t len, char out[17])
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	snprintf(out, 17, "%016" PRIx64, h);
}

/* sqshbuild's exit status when the registry refused the image to the credentials used. */
#define SQ_BUILD_REFUSED 3

static const char *host(void)
{
	static char name[256];

	if (name[0] == '\0' && gethostname(name, sizeof(name) - 1) < 0)
		snprintf(name, sizeof(name), "this node");
	return name;
}

int sq_image_check_file(const char *what, const char *path, char identity[17],
			char *err, size_t errlen)
{
	unsigned char magic[4];
	unsigned int mode;
	struct stat st;
	char id[160];
	int fd, n;

	/* Stat'ed before it is opened: a FIFO, device, directory or socket put where an image
	 * is expected is refused without being opened (a FIFO would block slurmstepd). */
	fd = sq_open_regular(AT_FDCWD, path, 0, &mode);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR)
			sq_errf(err, errlen, "%s: no such file on %s: check the path; images must "
				"be on storage every node sees (e.g. /fsx)", what, host());
		else if (e == EACCES)
			sq_errf(err, errlen, "%s: permission denied for the job user on %s: make "
				"the file (and its directories) readable by you", what, host());
		else if (e == EINVAL)
			sq_errf(err, errlen, "%s: %s is %s, not a regular file: give the path of a "
				".sqsh image (a file built by sqshbuild or mksquashfs)", what, path,
				sq_file_kind(mode));
		else if (e == EAGAIN)
			sq_errf(err, errlen, "%s: %s was replaced while it was opened: try again, "
				"and keep images where other users cannot replace them", what, path);
		else
			sq_errf(err, errlen, "%s: cannot open it on %s: %s", what, host(),
				strerror(e));
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		sq_errf(err, errlen, "%s: cannot stat it on %s: %s", what, host(),
			strerror(errno));
		close(fd);
		return -1;
	}
	n = (int)pread(fd, magic, sizeof(magic), 0);
	close(fd);
	if (n != 4 || memcmp(magic, "hsqs", 4) != 0) {
		sq_errf(err, errlen, "%s: not a squashfs image (no 'hsqs' magic at the start): "
			"build one with sqshbuild or mksquashfs", what);
		return -1;
	}
	n = snprintf(id, sizeof(id), "%ju:%ju:%jd:%jd.%09ld", (uintmax_t)st.st_dev,
		     (uintmax_t)st.st_ino, (intmax_t)st.st_size, (intmax_t)st.st_mtim.tv_sec,
		     st.st_mtim.tv_nsec);
	sq_hash_hex(id, (size_t)n, identity);
	return 0;
}

static char *absolute(const char *path, const char *cwd)
{
	char *out = NULL;

	if (path[0] == '/')
		return strdup(path);
	if (cwd == NULL || asprintf(&out, "%s/%s", cwd, path) < 0)
		return NULL;
	return out;
}

/* Add one line to img->note. */
static void add_note(struct sq_image *img, const char *line)
{
	size_t n = strlen(img->note);

	if (line[0] != '\0')
		snprintf(img->note + n, sizeof(img->note) - n, "%s%s", n ? "\n" : "", line);
}

/* sqshbuild's lines for srun: this build pinned the job's digest, or the registry could
 * not be reached and a cached digest stands in for the tag. */
static void pass_pin_line(int fd, int quiet_pin, struct sq_image *out)
{
	static const char prefix[] = "sqshbuild: job ", offline[] = "sqshbuild: offline: ";
	char *text = sq_capture_read(fd), *line, *save = NULL;
	char note[1024];

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		int pin = strncmp(line, prefix, sizeof(prefix) - 1) == 0;
		if ((!pin || quiet_pin) && strncmp(line, offline, sizeof(offline) - 1) != 0)
			continue;
		snprintf(note, sizeof(note), "squall: %s", line + strlen("sqshbuild: "));
		add_note(out, note);
	}
	free(text);
}

/* sqshbuild's progress lines, passed on as they come (image.h say), while the step waits
 * for its image. */
struct progress_pass {
	off_t seen;       /* how much of the capture was looked at: up to its last newline */
	void (*say)(const char *line);
};

static void pass_progress(int err_fd, void *arg)
{
	static const char prefix[] = "sqshbuild: progress: ";
	struct progress_pass *p = arg;
	char buf[4096], *line, *end;
	ssize_t got = pread(err_fd, buf, sizeof(buf) - 1, p->seen);

	if (got <= 0)
		return;
	buf[got] = '\0';
	end = strrchr(buf, '\n');
	if (end == NULL) {
		/* a line longer than the buffer: skip it whole */
		if (got == (ssize_t)sizeof(buf) - 1)
			p->seen += got;
		return;
	}
	*end = '\0';
	p->seen += end - buf + 1;
	for (line = buf; line != NULL; line = end) {
		end = strchr(line, '\n');
		if (end != NULL)
			*end++ = '\0';
		if (strncmp(line, prefix, sizeof(prefix) - 1) == 0)
			p->say(line + strlen("sqshbuild: "));
	}
}

/* One run of `sqshbuild build`: 0 when it ran (*status; line: its last stdout line when
 * it exited 0, else its last stderr line), -1 with err. for_user: the job user's name when
 * the builder runs it (it then does only what that user may: docs/security.md). */
static int run_build(const char *text, const struct sq_image_env *e, char *const envp[],
		     const struct sq_cred *cred, const struct sq_spawn_opts *o,
		     const char *for_user, struct sq_watch *w, int *status, char *line,
		     size_t linelen, struct sq_image *out, char *err, size_t errlen)
{
	const char *argv[16];
	char every[16];
	struct progress_pass pass = { 0, e->say };
	struct sq_spawn_opts with = o != NULL ? *o : (struct sq_spawn_opts){ NULL, -1, NULL, 0,
									      NULL, NULL,
									      e->cgroup_procs };
	struct sq_child child;
	int n = 0, ok;

	argv[n++] = e->sqshbuild;
	argv[n++] = "build";
	argv[n++] = "--quiet";
	argv[n++] = "--cache-dir";
	argv[n++] = e->cache_dir;
	if (e->job != NULL && e->job[0] != '\0') {
		argv[n++] = "--job";
		argv[n++] = e->job;
	}
	if (for_user != NULL) {
		argv[n++] = "--for-user";
		argv[n++] = for_user;
	}
	if (e->progress_s > 0 && e->say != NULL) {
		snprintf(every, sizeof(every), "%d", e->progress_s);
		argv[n++] = "--progress-every";
		argv[n++] = every;
		with.tick = pass_progress;
		with.tick_arg = &pass;
	}
	argv[n++] = text;
	argv[n] = NULL;
	if (sq_run_watched(e->sqshbuild, (char *const *)argv, envp, cred, &with, w, status,
			   &child, err, errlen) < 0)
		return -1;
	ok = WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
	sq_capture_tail(ok ? child.out_fd : child.err_fd, 1, line, linelen);
	if (ok)
		pass_pin_line(child.err_fd, e->quiet_pin, out);
	sq_child_close(&child);
	return 0;
}

/* The job user's name, for the builder's --for-user; 0 ok, -1 with err. */
static int user_name(uid_t uid, char *name, size_t namelen, char *err, size_t errlen)
{
	struct passwd pw, *res = NULL;
	char buf[16384];

	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL ||
	    strlen(pw.pw_name) >= namelen)
		return sq_errf(err, errlen, "the job's user (uid %u) has no name on %s: the "
			       "image builder builds only for a named user; check the node's "
			       "user database", (unsigned)uid, host());
	snprintf(name, namelen, "%s", pw.pw_name);
	return 0;
}

/* As the builder when the node has one: 1 it ran (*status, line), 0 build as the user
 * (no builder, or it may not pull this for the user: exit status 3), -1 with err. */
static int build_as_builder(const char *text, const struct sq_image_env *e,
			    struct sq_watch *w, struct sq_image *out, int *status, char *line,
			    size_t linelen, char *err, size_t errlen)
{
	const struct sq_spawn_opts in_root = { "/", 022, NULL, 0, NULL, NULL, e->cgroup_procs };
	static const char prefix[] = "sqshbuild: error: ";
	struct sq_builder b;
	char note[2048], name[256];
	int rc;

	if (sq_builder_find(e->builder_conf, &b, note, sizeof(note)) == 0) {
		add_note(out, note);
		return 0;
	}
	add_note(out, note);
	if (user_name(e->cred->uid, name, sizeof(name), err, errlen) < 0) {
		sq_builder_free(&b);
		return -1;
	}
	rc = run_build(text, e, b.envp, &b.cred, &in_root, name, w, status, line, linelen,
		       out, err, errlen);
	sq_builder_free(&b);
	if (rc < 0)
		return -1;
	if (!WIFEXITED(*status) || WEXITSTATUS(*status) != SQ_BUILD_REFUSED)
		return 1;
	/* Why the builder would not (its one error line), so the user knows what follows. */
	snprintf(note, sizeof(note), "squall: the image builder may not pull %s; building it "
		 "as you, in your own cache (%.1024s)", text,
		 strncmp(line, prefix, sizeof(prefix) - 1) == 0 ? line + sizeof(prefix) - 1 :
		 line);
	add_note(out, note);
	return 0;
}

/* The job's environment less what would put the site's rules aside for the user's own
 * build: a policy file or site configuration of her choosing (docs/security.md). The
 * strings stay the job's; the array is the caller's to free. NULL when out of memory. */
static char **site_ruled_env(char *const envp[])
{
	static const char *const mine[] = { "SQSHBUILD_POLICY=", "SQSHBUILD_SITE_CONFIG=" };
	size_t n = 0, k = 0;
	char **out;

	while (envp != NULL && envp[n] != NULL)
		n++;
	out = calloc(n + 1, sizeof(*out));
	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		int drop = 0;
		for (size_t j = 0; j < sizeof(mine) / sizeof(mine[0]); j++)
			drop |= strncmp(envp[i], mine[j], strlen(mine[j])) == 0;
		if (!drop)
			out[k++] = envp[i];
	}
	return out;
}

/* No builder, or it may not pull this: as the user, with the job's environment. */
static int build_as_user(const char *text, const struct sq_image_env *e,
			 struct sq_watch *w, int *status, char *line, size_t linelen,
			 struct sq_image *out, char *err, size_t errlen)
{
	char **envp = site_ruled_env(e->envp);
	int rc;

	if (envp == NULL)
		return sq_errf(err, errlen, "out of memory");
	rc = run_build(text, e, envp, e->cred, NULL, NULL, w, status, line, linelen, out, err,
		       errlen);
	free(envp);
	return rc;
}

/* The name of the memo of (job, text) (pinmemo.h). 0, or -1 when too long. */
static int memo_hash(const char *job, const char *text, char hash[17])
{
	char key[4096];
	int n = snprintf(key, sizeof(key), "%s\n%s", job != NULL ? job : "", text);

	if (n < 0 || (size_t)n >= sizeof(key))
		return -1;
	sq_hash_hex(key, (size_t)n, hash);
	return 0;
}

/* 1 when an earlier step of the job on this node resolved text to a file that is still
 * the same file: out filled as a build would. 0: build. */
static int memo_hit(const char *text, const struct sq_image_env *e, struct sq_image *out)
{
	char hash[17], id[17], what[PATH_MAX + 64], err[512];
	char *path = NULL;

	if (memo_hash(e->job, text, hash) < 0 ||
	    sq_pinmemo_find(SQ_PINMEMO_DIR, e->job, text, hash, &path, id) != 1)
		return 0;
	snprintf(what, sizeof(what), "--container-image=%s", text);
	if (sq_image_check_file(what, path, out->identity, err, sizeof(err)) < 0 ||
	    strcmp(out->identity, id) != 0) {
		free(path);
		return 0;
	}
	out->path = path;
	out->from_registry = 1;
	out->from_memo = 1;
	return 1;
}

static int build_from_registry(const char *text, const struct sq_image_env *e,
			       struct sq_image *out, char *err, size_t errlen)
{
	char line[PATH_MAX + 64], what[2 * PATH_MAX + 160], hash[17];
	struct sq_srun_watch srun;
	struct sq_watch watch = { sq_srun_gone, &srun, 0 };
	int status, ran;

	/* A later step of the job on this node: what an earlier one got (pinmemo.h). */
	if (memo_hit(text, e, out))
		return 0;
	if (access(e->sqshbuild, X_OK) < 0) {
		sq_errf(err, errlen, "--container-image=%s: registry images are built by "
			"sqshbuild, which is not executable at %s on %s: install squall there or "
			"set sqshbuild= in plugstack.conf", text, e->sqshbuild, host());
		return -1;
	}
	/* A cancelled step's kill waits for user_init's end: the build stops when srun goes.
	 * The batch step has no srun: nothing is watched there. */
	srun.n = 0;
	if (e->srun_step)
		sq_srun_watch_init(&srun);
	ran = build_as_builder(text, e, &watch, out, &status, line, sizeof(line), err, errlen);
	if (ran < 0)
		return -1;
	if (ran == 0 && !watch.stopped &&
	    build_as_user(text, e, &watch, &status, line, sizeof(line), out, err, errlen) < 0)
		return -1;
	if (watch.stopped)
		return sq_errf(err, errlen, "--container-image=%s: the job's srun has gone (the "
			       "step was cancelled or ended): the image build was stopped", text);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char why[64];
		sq_status_text(status, why, sizeof(why));
		/* Pyxis's first words, which scripts grep. */
		sq_errf(err, errlen, "failed to import docker image: %s: sqshbuild failed (%s): "
			"%s", text, why, line[0] ? line : "it printed no error");
		return -1;
	}
	if (line[0] != '/') {
		sq_errf(err, errlen, "--container-image=%s: sqshbuild printed no image path",
			text);
		return -1;
	}
	out->path = strdup(line);
	out->from_registry = 1;
	snprintf(what, sizeof(what), "--container-image=%s (cached as %s)", text, line);
	if (out->path == NULL)
		return sq_errf(err, errlen, "out of memory");
	if (sq_image_check_file(what, out->path, out->identity, err, errlen) < 0)
		return -1;
	if (memo_hash(e->job, text, hash) == 0)
		sq_pinmemo_keep(SQ_PINMEMO_DIR, e->job, text, hash, out->path, out->identity);
	return 0;
}

/* The site policy on a file named by path (filepolicy.h); once judged, the step runs
 * the real path it accepted. 0 ok, -1 with err. */
static int judged_file(struct sq_image *out, const char *sqshbuild, char *err, size_t errlen)
{
	char real[PATH_MAX];
	char *copy;
	int rc = sq_filepolicy_check(out->path, sqshbuild, real, err, errlen);

	if (rc <= 0)
		return rc;
	copy = strdup(real);
	if (copy == NULL)
		return sq_errf(err, errlen, "out of memory");
	free(out->path);
	out->path = copy;
	return 0;
}

int sq_image_resolve(const char *text, const struct sq_image_env *e, struct sq_image *out,
		     char *err, size_t errlen)
{
	struct sq_image_ref ref;
	char what[PATH_MAX + 32];
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (sq_imgref_parse(text, &ref, err, errlen) < 0) {
		sq_imgref_free(&ref);
		return -1;
	}
	switch (ref.kind) {
	case SQ_IMAGE_FILE:
		out->path = absolute(ref.path, e->cwd);
		if (out->path == NULL) {
			sq_errf(err, errlen, "--container-image=%s: cannot make the path "
				"absolute", text);
			rc = -1;
			break;
		}
		snprintf(what, sizeof(what), "--container-image=%s", text);
		rc = sq_image_check_file(what, out->path, out->identity, err, errlen);
		if (rc == 0)
			rc = judged_file(out, e->sqshbuild, err, errlen);
		break;
	case SQ_IMAGE_REGISTRY:
		rc = build_from_registry(text, e, out, err, errlen);
		break;
	default:
		sq_errf(err, errlen, "--container-image=%s: dockerd:// images are not "
			"supported: push the image to a registry or build a .sqsh with "
			"sqshbuild", text);
		rc = -1;
		break;
	}
	sq_imgref_free(&ref);
	return rc;
}

void sq_image_free(struct sq_image *img)
{
	free(img->path);
	img->path = NULL;
}
