/*
 * squall-efa-hook: run by Enroot inside the container's namespaces, before the root
 * switch (the conf file's hooks(), see docs/efa.md). Looks at the image under
 * $ENROOT_ROOTFS, decides whether the host's EFA libraries must be mounted in, and
 * appends the variables to $ENROOT_ENVIRON and the mounts to $ENROOT_MOUNTS.
 *
 *   squall-efa-hook [--mode auto|require|off] [--sysfs-root DIR] [--dev-root DIR]
 *                   [--opt-root DIR] [--user-set NAME,...] [--nccl-debug LEVEL]
 *
 * Exit 1 with one line on stderr aborts the container start (require mode with
 * nothing usable, or a usage error); warnings go to stderr and the start goes on.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "efa.h"
#include "efa_internal.h"
#include "options.h"
#include "strbuf.h"

#define PROG "squall-efa-hook"

static int fail(const char *msg)
{
	fprintf(stderr, "squall: %s\n", msg);
	return 1;
}

static int append(const char *var, const char *text, char *err, size_t errlen)
{
	const char *path = getenv(var);
	size_t len = strlen(text), done = 0;
	int fd;

	if (len == 0)
		return 0;
	if (!path || !*path) {
		sq_errf(err, errlen, "%s is not set: run " PROG " from Enroot's hooks, which "
			"set ENROOT_ROOTFS, ENROOT_ENVIRON and ENROOT_MOUNTS", var);
		return -1;
	}
	fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0) {
		sq_errf(err, errlen, PROG " cannot append to %s (%s): %s", var, path,
			strerror(errno));
		return -1;
	}
	while (done < len) {
		ssize_t w = write(fd, text + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			sq_errf(err, errlen, PROG " could not write %s (%s): %s", var, path,
				strerror(errno));
			close(fd);
			return -1;
		}
		done += (size_t)w;
	}
	return close(fd) == 0 ? 0 : -1;
}

static int parse_mode(const char *s, int *mode)
{
	if (strcmp(s, "auto") == 0)
		*mode = SQ_EFA_SETTING_AUTO;
	else if (strcmp(s, "require") == 0)
		*mode = SQ_EFA_SETTING_REQUIRE;
	else if (strcmp(s, "off") == 0)
		*mode = SQ_EFA_SETTING_OFF;
	else
		return -1;
	return 0;
}

/* The hook's options into roots and req. 0 ok; 1 refused (said on stderr). */
static int parse_args(int argc, char **argv, struct sq_efa_roots *roots,
		      struct sq_efa_request *req)
{
	static const struct option longopts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "sysfs-root", required_argument, NULL, 's' },
		{ "dev-root", required_argument, NULL, 'd' },
		{ "opt-root", required_argument, NULL, 'o' },
		{ "user-set", required_argument, NULL, 'u' },
		{ "nccl-debug", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 }
	};
	int c;

	opterr = 0; /* one line of our own instead of getopt's */
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (parse_mode(optarg, &req->mode) != 0)
				return fail(PROG " --mode takes auto, require or off");
			break;
		case 's': roots->sysfs = optarg; break;
		case 'd': roots->dev = optarg; break;
		case 'o': roots->opt = optarg; break;
		case 'u': req->user_set = optarg; break;
		case 'n': req->nccl_debug = optarg; break;
		default:
			fprintf(stderr, "squall: " PROG ": bad option '%s': use [--mode "
				"auto|require|off] [--sysfs-root DIR] [--dev-root DIR] [--opt-root DIR] "
				"[--user-set NAMES] [--nccl-debug LEVEL]\n", argv[optind - 1]);
			return 1;
		}
	}
	if (optind != argc)
		return fail(PROG " takes options only: remove the extra argument");
	return 0;
}

/* What LD_LIBRARY_PATH would be without us, into ld: the environment built so far wins
 * over the image's /etc/environment, as it will in the container. NULL when neither
 * sets it. */
static const char *ld_library_path(const char *rootfs, char *ld, size_t len)
{
	const char *environ_file = getenv("ENROOT_ENVIRON");
	const char *found = NULL;
	int rootfd;

	if (environ_file && *environ_file &&
	    sq_efa_env_file_get(AT_FDCWD, environ_file, "LD_LIBRARY_PATH", ld, len))
		return ld;
	rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd >= 0) {
		if (sq_efa_env_file_get(rootfd, "etc/environment", "LD_LIBRARY_PATH", ld, len))
			found = ld;
		close(rootfd);
	}
	return found;
}

int main(int argc, char **argv)
{
	struct sq_efa_roots roots = { NULL, NULL, NULL };
	struct sq_efa_request req = { SQ_EFA_SETTING_AUTO, NULL, NULL, NULL };
	struct sq_efa_node node;
	struct sq_efa_image image;
	struct sq_efa_plan plan;
	char err[1024], ld[4096];
	const char *rootfs;
	int rc = 0;

	if (parse_args(argc, argv, &roots, &req) != 0)
		return 1;
	if (req.mode == SQ_EFA_SETTING_OFF)
		return 0;

	rootfs = getenv("ENROOT_ROOTFS");
	if (sq_efa_detect(&roots, &node, err, sizeof(err)) != 0 ||
	    sq_efa_image_scan(rootfs, &image, err, sizeof(err)) != 0)
		return fail(err);
	req.ld_library_path = ld_library_path(rootfs, ld, sizeof(ld));

	if (sq_efa_plan(&node, &image, &req, &plan, err, sizeof(err)) != 0)
		return fail(err);
	if (append("ENROOT_ENVIRON", plan.env, err, sizeof(err)) != 0 ||
	    append("ENROOT_MOUNTS", plan.fstab, err, sizeof(err)) != 0)
		rc = fail(err);
	fputs(plan.warnings, stderr);
	sq_efa_plan_free(&plan);
	return rc;
}
