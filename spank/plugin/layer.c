/* layer.c: see layer.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layer.h"
#include "mountinfo.h"
#include "protocol.h"
#include "runcmd.h"
#include "smallio.h"
#include "strbuf.h"

#define LAYER_WAIT_MS 30000

/* squall-layer's command line: --pid PID, then --share, or --renew DEV for each tmpfs the
 * runtime mounted in the container (its own, to be made fresh for the step), in the
 * caller's buffers; max: the most entries before the last --renew pair and the NULL. */
static void layer_argv(const struct sq_container *c, const char *layer_path,
		       enum sq_layer_kind kind, const char **argv, int max, char *pidtext,
		       size_t pidlen, char *devs, size_t devlen)
{
	char path[64], *mine, *theirs, *save = NULL;
	size_t len;
	int n = 0;

	snprintf(pidtext, pidlen, "%d", (int)c->pid);
	argv[n++] = layer_path;
	argv[n++] = "--pid";
	argv[n++] = pidtext;
	if (kind == SQ_LAYER_SHARE) {
		argv[n++] = "--share";
		argv[n] = NULL;
		return;
	}
	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)c->pid);
	theirs = sq_read_file(path, &len);
	mine = sq_read_file("/proc/self/mountinfo", &len);
	devs[0] = '\0';
	if (theirs != NULL)
		sq_mountinfo_fresh_tmpfs(theirs, mine, devs, devlen);
	free(theirs);
	free(mine);
	for (char *d = strtok_r(devs, " ", &save); d != NULL && n < max;
	     d = strtok_r(NULL, " ", &save)) {
		argv[n++] = "--renew";
		argv[n++] = d;
	}
	argv[n] = NULL;
}

/* Its "ready PID" line within LAYER_WAIT_MS: the helper's PID, or -1 with err. */
static pid_t layer_ready(int fd, struct sq_child *child, char *err, size_t errlen)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char line[32] = "";
	ssize_t got = poll(&p, 1, LAYER_WAIT_MS) > 0 ? read(fd, line, sizeof(line) - 1) : -1;
	int layer = -1;

	if (got > 0)
		line[got] = '\0';
	/* It holds the layer until the release pipe closes, so PID is it. */
	if (got <= 0 || sscanf(line, LAYER_MSG_READY " %d", &layer) != 1 || layer <= 0) {
		sq_child_failure(child, "the step's layer", got == 0 ? "it exited" : "no answer",
				 err, errlen);
		return -1;
	}
	return (pid_t)layer;
}

int sq_layer_make(struct sq_container *c, const char *layer_path, const struct sq_cred *cred,
		  enum sq_layer_kind kind, char *err, size_t errlen)
{
	char pidtext[24], path[64], devs[2048];
	const char *argv[8 + 2 * 64];
	int ready[2] = { -1, -1 }, release[2] = { -1, -1 }, pass[LAYER_FD_COUNT];
	int spawned, rv = -1;
	struct sq_child child = { -1, -1, -1 };
	pid_t layer;

	layer_argv(c, layer_path, kind, argv, (int)(sizeof(argv) / sizeof(argv[0])) - 2, pidtext,
		   sizeof(pidtext), devs, sizeof(devs));
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(release, O_CLOEXEC) < 0) {
		sq_errf(err, errlen, "cannot make the step's layer: %s", strerror(errno));
		goto fail;
	}
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)c->pid);
	pass[LAYER_FD_USERNS - SQ_FD_PASSED] = c->ns_user >= 0 ? c->ns_user
							       : open(path, O_RDONLY | O_CLOEXEC);
	pass[LAYER_FD_MNTNS - SQ_FD_PASSED] = c->ns_mnt;
	pass[LAYER_FD_READY - SQ_FD_PASSED] = ready[1];
	pass[LAYER_FD_RELEASE - SQ_FD_PASSED] = release[0];
	spawned = sq_spawn_detached(layer_path, (char *const *)argv, NULL, cred, pass,
				    LAYER_FD_COUNT, &child, err, errlen);
	if (c->ns_user < 0 && pass[LAYER_FD_USERNS - SQ_FD_PASSED] >= 0)
		close(pass[LAYER_FD_USERNS - SQ_FD_PASSED]);
	if (spawned < 0)
		goto fail;
	close(ready[1]);
	ready[1] = -1;
	close(release[0]);
	release[0] = -1;
	layer = layer_ready(ready[0], &child, err, errlen);
	if (layer < 0 || sq_container_use_layer(c, layer, err, errlen) < 0)
		goto fail;
	rv = 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (release[i] >= 0)
			close(release[i]);
	}
	sq_child_close(&child);
	return rv;
}
