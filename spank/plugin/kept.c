/* kept.c: see kept.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "env.h"
#include "extracted_name.h"
#include "hooktext.h"
#include "kept.h"
#include "layer.h"
#include "lifecycle.h"
#include "mountinfo.h"
#include "nodecache.h"
#include "protocol.h"
#include "report.h"
#include "smallio.h"
#include "strbuf.h"

static void kept_path(char *buf, size_t len, const char *dir, uint32_t jobid, const char *key,
		      const char *suffix)
{
	snprintf(buf, len, "%s/kept-%u-%s.%s", dir, (unsigned)jobid, key, suffix);
}

/* A connected socket to the keeper of (jobid, key); -1 (errno) when none answers. */
static int dial(const char *dir, uint32_t jobid, const char *key)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd;

	kept_path(addr.sun_path, sizeof(addr.sun_path), dir, jobid, key, "sock");
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int sq_kept_key(const struct sq_start_request *r, const char *identity, char key[33])
{
	size_t len;
	char flags[64], *conf = r->conf_path ? sq_read_file(r->conf_path, &len) : NULL;
	char *rc = r->rc_path ? sq_read_file(r->rc_path, &len) : NULL;
	char *hooks = sq_hooks_text(r->envp);
	const char *parts[] = { r->enroot, r->target, identity ? identity : "", flags,
				conf ? conf : "", rc ? rc : "-", NULL };
	int ok;

	snprintf(flags, sizeof(flags), "rw=%d root=%d", r->writable, r->remap_root);
	ok = (!r->conf_path || conf) && (!r->rc_path || rc) &&
	     sq_life_key(parts, r->envp, hooks, key) == 0;
	free(hooks);
	free(conf);
	free(rc);
	return ok ? 0 : -1;
}

int sq_kept_attach(struct sq_container *c, const struct sq_kept_request *r, int *started,
		   char *err, size_t errlen)
{
	char lock[PATH_MAX], sock[PATH_MAX], idle[16];
	const char *args[16] = { "--job", sock, idle, NULL };
	struct sq_start_request start = *r->start;
	int lockfd, fd, rv = -1;

	*started = 0;
	kept_path(lock, sizeof(lock), r->runtime_dir, r->jobid, r->key, "lock");
	kept_path(sock, sizeof(sock), r->runtime_dir, r->jobid, r->key, "sock");
	if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		sq_errf(err, errlen, "runtime directory %s is too long for the kept container's "
			"socket (at most about 60 characters: plugstack.conf runtime_path)",
			r->runtime_dir);
		return -1;
	}
	lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX) < 0) {
		sq_errf(err, errlen, "cannot lock %s: %s", lock, strerror(errno));
		if (lockfd >= 0)
			close(lockfd);
		return -1;
	}
	fd = dial(r->runtime_dir, r->jobid, r->key);
	if (fd >= 0) {
		rv = sq_container_attach_kept(c, fd, r->start->cred->uid, err, errlen);
		goto fail;
	}
	/* None answers: start it, kept for the job. */
	snprintf(idle, sizeof(idle), "%d", r->idle_s);
	for (int i = 0, n = 3; r->extra_args != NULL && r->extra_args[i] != NULL && n < 15; i++)
		args[n++] = r->extra_args[i];
	start.keeper_args = args;
	if (sq_container_start_kept(c, &start, err, errlen) < 0)
		goto fail;
	*started = 1;
	rv = 0;
fail:
	flock(lockfd, LOCK_UN);
	close(lockfd);
	return rv;
}


/* Where the job's kept container starts from: the image's extracted tree when the
 * node-local cache has it (its own key: a container from the tree is another container),
 * else the image, with its extraction started in the background (extracted.h). args gets
 * the keeper's cache arguments; the strings live in the caller's buffers. */
static void kept_source(const struct sq_kept_step *s, struct sq_start_request *req,
			const char **args, char *identity, size_t idlen, char *data_dir,
			size_t datalen, char *cache_key, char *max_bytes, size_t maxlen)
{
	const char *tool = sq_extracted_tool(), *nodes;

	snprintf(identity, idlen, "%s", s->identity ? s->identity : "");
	if (!s->cache_dir[0] || s->image_path == NULL || s->identity == NULL || tool == NULL ||
	    sq_extracted_key(s->image_path, s->identity, cache_key) < 0)
		return;
	if (sq_extracted_ready(s->cache_dir, cache_key)) {
		snprintf(identity, idlen, "%s/extracted-%s", s->identity, cache_key);
		snprintf(data_dir, datalen, "%s/kept-%u-%s.d", s->runtime_dir, (unsigned)s->jobid,
			 cache_key);
		if (mkdir(data_dir, 0700) < 0 && errno != EEXIST)
			return;
		req->target = "rootfs";
		args[0] = "--use-cache";
		args[1] = s->cache_dir;
		args[2] = cache_key;
		args[3] = data_dir;
		args[4] = NULL;
		return;
	}
	/* A job on more nodes than local_cache_max_nodes starts no extraction: each node would
	 * read the whole image from the shared file system (nodecache.h). */
	nodes = sq_env_value(req->envp, "SLURM_JOB_NUM_NODES");
	if (nodes != NULL && !sq_cache_may_fill(nodes, s->cache_max_nodes))
		return;
	snprintf(max_bytes, maxlen, "%llu", (unsigned long long)s->cache_gb << 30);
	args[0] = "--fill-cache";
	args[1] = s->cache_dir;
	args[2] = cache_key;
	args[3] = s->image_path;
	args[4] = tool;
	args[5] = max_bytes;
	args[6] = NULL;
}

int sq_kept_serve(struct sq_container *c, const struct sq_start_request *req0,
		  const struct sq_kept_step *s, const char **served, char *note, size_t notelen,
		  char *err, size_t errlen)
{
	struct sq_start_request req = *req0;
	struct sq_kept_request kr;
	const char *args[8] = { NULL };
	char key[33], what[48], identity[128], data_dir[PATH_MAX + 64], cache_key[33] = "";
	char max_bytes[32];
	int started = 0;

	note[0] = '\0';
	kept_source(s, &req, args, identity, sizeof(identity), data_dir, sizeof(data_dir),
		    cache_key, max_bytes, sizeof(max_bytes));
	if (sq_kept_key(req0, identity, key) < 0) {
		*served = "started for the step (the kept container's key could not be read)";
		return 0;
	}
	kr = (struct sq_kept_request){ s->runtime_dir, s->jobid, key, &req, s->idle_s, args };
	if (sq_kept_attach(c, &kr, &started, err, errlen) < 0)
		return -1;
	sq_phase_end(started ? "start container (kept for the job)" : "kept container reused");
	if (started) {
		snprintf(what, sizeof(what), "kept-%s", key);
		/* Only the job epilog's safety net needs it: note it, go on. */
		sq_container_record(c, s->runtime_dir, s->jobid, what, note, notelen);
		if (args[0] != NULL && strcmp(args[0], "--use-cache") == 0)
			*served = "started from the node's extracted copy (extracted cache hit), "
				  "kept for the job";
		else if (args[0] != NULL)
			*served = "started from the image, kept for the job; extracting it on this "
				  "node in the background";
		else
			*served = "started from the image, kept for the job";
	} else {
		*served = strcmp(req.target, "rootfs") == 0 ?
			"kept container of the job reused (no runtime start; extracted copy)" :
			"kept container of the job reused (no runtime start)";
	}
	if (sq_layer_make(c, s->layer_path, req.cred, SQ_LAYER_FRESH, err, errlen) < 0) {
		/* The node cannot make layers (an old kernel): a container for each step. */
		snprintf(note, notelen, "no fresh layer on the kept container (%s): starting one "
			 "for the step", err);
		sq_container_stop(c);
		*served = "no fresh layer on this node (the kernel refused it)";
		return 0;
	}
	sq_phase_end("fresh layer");
	sq_container_record_layer(c, s->runtime_dir, s->jobid, s->stepid);
	return 1;
}
