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
#include "layer_record.h"
#include "lifecycle.h"
#include "mountinfo.h"
#include "nodecache.h"
#include "prestart_mark.h"
#include "protocol.h"
#include "records.h"
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
	char lock[PATH_MAX], sock[PATH_MAX], idle[16], what[48], note[256];
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
	/* The job prolog returns now: a step that comes waits on the lock (prestart.h). A
	 * prolog that stopped waiting is no reason to stop. */
	if (r->notify_fd > 0) {
		ssize_t w = write(r->notify_fd, "L", 1);
		(void)w;
	}
	fd = dial(r->runtime_dir, r->jobid, r->key);
	if (fd >= 0) {
		rv = sq_container_attach_kept(c, fd, r->start->cred->uid, err, errlen);
		goto fail;
	}
	if (r->join_only) {
		rv = 1;
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
	/* Only the job epilog's safety net needs it: note it, go on. */
	snprintf(what, sizeof(what), "kept-%s", r->key);
	sq_record_keeper(r->runtime_dir, r->jobid, what, c->keeper.pid, c->keeper.starttime,
			 r->note ? r->note : note, r->note ? r->notelen : sizeof(note));
fail:
	flock(lockfd, LOCK_UN);
	close(lockfd);
	return rv;
}


/* The keeper's cache arguments and the strings they point to. */
struct kept_args {
	const char *argv[13];
	char identity[128], data_dir[PATH_MAX + 64], cache_key[33], max_bytes[32];
	char jobstep[32], wait_s[16];
};

/* A step on several nodes that fill their caches reads the image once, on its first node,
 * which sends it to the others with sbcast (keeper/shared_copy.h): "--share MODE JOB.STEP
 * SBCAST WAIT_S" after the cache arguments at argv[n] (WAIT_S: how long the others wait
 * for the copy to begin, local_cache_copy_wait). fill: this node extracts; else its tree
 * is there, and the first node then tells the others so ("none"). */
static void kept_share(const struct sq_kept_step *s, const struct sq_start_request *req,
		       struct kept_args *a, int n, int fill)
{
	const char *nodes = sq_env_value(req->envp, "SLURM_STEP_NUM_NODES");
	const char *sbcast = sq_extracted_sbcast();

	/* The job prolog runs in no step: nothing to send with. */
	if (nodes == NULL || atoi(nodes) < 2 || sbcast == NULL || (!fill && s->nodeid != 0) ||
	    s->mode == SQ_KEPT_PRESTART)
		return;
	snprintf(a->jobstep, sizeof(a->jobstep), "%u.%u", (unsigned)s->jobid,
		 (unsigned)s->stepid);
	a->argv[n] = "--share";
	a->argv[n + 1] = s->nodeid != 0 ? "recv" : fill ? "send" : "none";
	a->argv[n + 2] = a->jobstep;
	a->argv[n + 3] = sbcast;
	snprintf(a->wait_s, sizeof(a->wait_s), "%d", s->copy_wait_s);   /* 0: the default */
	a->argv[n + 4] = a->wait_s;
	a->argv[n + 5] = NULL;
}

/* Where the job's kept container starts from: the image's extracted tree when the
 * node-local cache has it (its own key: a container from the tree is another container),
 * else the image, with its extraction started in the background (extracted.h). a->argv
 * gets the keeper's cache arguments. */
static void kept_source(const struct sq_kept_step *s, struct sq_start_request *req,
			struct kept_args *a)
{
	const char *tool = sq_extracted_tool(), *nodes;
	int may_fill;

	snprintf(a->identity, sizeof(a->identity), "%s", s->identity ? s->identity : "");
	if (!s->cache_dir[0] || s->image_path == NULL || s->identity == NULL || tool == NULL ||
	    sq_extracted_key(s->image_path, s->identity, a->cache_key) < 0)
		return;
	/* A job on more nodes than local_cache_max_nodes starts no extraction: each node would
	 * extract the whole image (nodecache.h). */
	nodes = sq_env_value(req->envp, "SLURM_JOB_NUM_NODES");
	may_fill = nodes == NULL || sq_cache_may_fill(nodes, s->cache_max_nodes);
	if (sq_extracted_ready(s->cache_dir, a->cache_key)) {
		snprintf(a->identity, sizeof(a->identity), "%s/extracted-%s", s->identity,
			 a->cache_key);
		snprintf(a->data_dir, sizeof(a->data_dir), "%s/kept-%u-%s.d", s->runtime_dir,
			 (unsigned)s->jobid, a->cache_key);
		if (mkdir(a->data_dir, 0700) < 0 && errno != EEXIST)
			return;
		req->target = "rootfs";
		a->argv[0] = "--use-cache";
		a->argv[1] = s->cache_dir;
		a->argv[2] = a->cache_key;
		a->argv[3] = a->data_dir;
		a->argv[4] = NULL;
		if (may_fill)
			kept_share(s, req, a, 4, 0);
		return;
	}
	if (!may_fill)
		return;
	snprintf(a->max_bytes, sizeof(a->max_bytes), "%llu",
		 (unsigned long long)s->cache_gb << 30);
	a->argv[0] = "--fill-cache";
	a->argv[1] = s->cache_dir;
	a->argv[2] = a->cache_key;
	a->argv[3] = s->image_path;
	a->argv[4] = tool;
	a->argv[5] = a->max_bytes;
	a->argv[6] = NULL;
	kept_share(s, req, a, 6, 1);
}

/* 1 when the job's kept container from the image itself runs on this node (its socket is
 * there): a node-local copy that finished during the job is for the job's next job, not a
 * second container for this one (issue 40: a runtime start of 1.5 s). key: its key. */
static int image_kept_runs(const struct sq_kept_step *s, const struct sq_start_request *req0,
			   char key[33])
{
	char sock[PATH_MAX];
	struct stat st;

	if (s->identity == NULL || sq_kept_key(req0, s->identity, key) < 0)
		return 0;
	kept_path(sock, sizeof(sock), s->runtime_dir, s->jobid, key, "sock");
	return lstat(sock, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* How a start with these keeper arguments starts the container, for the verbose log. */
static const char *started_how(const char *const *args)
{
	if (args[0] != NULL && strcmp(args[0], "--use-cache") == 0)
		return "started from the node's extracted copy (extracted cache hit), kept for the "
		       "job";
	if (args[0] != NULL)
		return "started from the image, kept for the job; extracting it on this node in "
		       "the background";
	return "started from the image, kept for the job";
}

int sq_kept_serve(struct sq_container *c, const struct sq_start_request *req0,
		  const struct sq_kept_step *s, const char **served, char *note, size_t notelen,
		  char *err, size_t errlen)
{
	struct sq_start_request req = *req0;
	struct sq_kept_request kr;
	struct kept_args a;
	const char **args = a.argv;
	char key[33];
	int started = 0, rc;

	note[0] = '\0';
	memset(&a, 0, sizeof(a));
	kept_source(s, &req, &a);
	if (strcmp(req.target, "rootfs") == 0 && image_kept_runs(s, req0, key)) {
		req = *req0;
		memset(&a, 0, sizeof(a));
		snprintf(a.identity, sizeof(a.identity), "%s", s->identity);
	}
	if (sq_kept_key(req0, a.identity, key) < 0) {
		*served = "started for the step (the kept container's key could not be read)";
		return 0;
	}
	kr = (struct sq_kept_request){ s->runtime_dir, s->jobid, key, &req, s->idle_s, args,
				       s->mode == SQ_KEPT_JOIN, s->notify_fd, note, notelen };
	/* The job's steps look for what the prolog starts once its marker is there, which is
	 * before the prolog returns (prestart_mark.h). */
	if (s->mode == SQ_KEPT_PRESTART && sq_prestart_mark(s->runtime_dir, s->jobid,
							    started_how(args)) < 0) {
		sq_errf(err, errlen, "cannot write the job's marker in %s: %s", s->runtime_dir,
			strerror(errno));
		return -1;
	}
	rc = sq_kept_attach(c, &kr, &started, err, errlen);
	if (rc != 0)
		return rc < 0 ? -1 : 0;   /* SQ_KEPT_JOIN and none runs: the caller goes on */
	sq_phase_end(started ? "start container (kept for the job)" : "kept container reused");
	if (started) {
		*served = started_how(args);
	} else {
		*served = strcmp(req.target, "rootfs") == 0 ?
			"kept container of the job reused (no runtime start; extracted copy)" :
			"kept container of the job reused (no runtime start)";
	}
	if (s->mode == SQ_KEPT_PRESTART)
		return 1;   /* the steps make their own layers */
	if (sq_layer_make(c, s->layer_path, req.cred, SQ_LAYER_FRESH, err, errlen) < 0) {
		/* The node cannot make layers (an old kernel): a container for each step. */
		snprintf(note, notelen, "no fresh layer on the kept container (%s): starting one "
			 "for the step", err);
		sq_container_stop(c);
		*served = "no fresh layer on this node (the kernel refused it)";
		return 0;
	}
	sq_phase_end("fresh layer");
	if (c->layer)
		sq_layer_record(s->runtime_dir, s->jobid, s->stepid, c->layer_dev, c->layer_ino);
	return 1;
}
