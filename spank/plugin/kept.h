/*
 * kept.h: the job's kept container on this node, from the plugin's side (lifecycle.h).
 *
 * The first step of a job that may reuse its container starts the runtime under a keeper
 * kept for the job (squall-keeper --job, keeper_client.h), which listens on
 * RUNTIME_DIR/kept-JOBID-KEY.sock; later steps with the same key connect there and are
 * handed pidfds of the container's first process instead of starting the runtime again.
 * Starting and finding are done under RUNTIME_DIR/kept-JOBID-KEY.lock, so concurrent
 * steps of a job start one container. Every step then gets a layer of its own on top of it
 * (squall-layer: a fresh writable root and fresh tmpfs mounts), which its tasks join.
 * At step end the step says "bye"; the container ends with the job (epilog, records.h), or
 * after KEPT_IDLE_S seconds without a step.
 */
#ifndef SQUALL_PLUGIN_KEPT_H
#define SQUALL_PLUGIN_KEPT_H

#include <stddef.h>
#include <stdint.h>

#include "container.h"
#include "lifecycle.h"

struct sq_kept_request {
	const char *runtime_dir;                 /* the user's, RUNTIME_PATH/UID */
	uint32_t jobid;
	const char *key;                         /* sq_life_key */
	const struct sq_start_request *start;    /* how to start it when none runs */
	int idle_s;                              /* the keeper's idle time before it ends */
	const char *const *extra_args;           /* more keeper arguments when it starts
						  * (--use-cache / --fill-cache), or NULL */
	int join_only;                           /* 1: never start one (none: return 1) */
	int notify_fd;                           /* > 0: one byte there once the lock is held */
	char *note;                              /* why the epilog's record was not written */
	size_t notelen;                          /* (a line for the log), or NULL */
};

/* How a caller uses the job's kept container (sq_kept_step.mode). */
enum sq_kept_mode {
	SQ_KEPT_STEP = 0,     /* a step: find it or start it, then the step's layer */
	SQ_KEPT_JOIN,         /* a step: only the one the job prolog started (prestart.h) */
	SQ_KEPT_PRESTART      /* the job prolog: find it or start it; no layer, no broadcast */
};

/* What a step brings to the job's kept container. */
struct sq_kept_step {
	const char *runtime_dir;      /* RUNTIME_PATH/UID */
	uint32_t jobid, stepid, nodeid;   /* nodeid: this node's index in the step */
	const char *image_path;       /* the resolved .sqsh, NULL without one */
	const char *identity;         /* its identity (image.h) */
	const char *cache_dir;        /* LOCAL_CACHE/UID, "" when none (extracted.h) */
	int cache_gb;                 /* its limit */
	int cache_max_nodes;          /* jobs on more nodes start no extraction; 0: any */
	int copy_wait_s;              /* a receiver's wait for its step's copy to begin */
	const char *layer_path;       /* squall-layer */
	int idle_s;                   /* the keeper's idle time */
	int mode;                     /* enum sq_kept_mode */
	int notify_fd;                /* SQ_KEPT_PRESTART: told once the lock is held (> 0) */
};

/* Serve a step sq_life_decide sent here (SQ_LIFE_KEPT) from the job's kept container:
 * find it or start it (from the node's extracted copy of the image when there is one, else
 * from the image with its extraction started) under its lock, then make the step's layer;
 * records for the epilog. 1 served (c holds it); 0 the caller starts a container for the
 * step (note may say why, for the log; SQ_KEPT_JOIN: none runs); -1 failed with err.
 * *served: how, for the verbose log, in every case. SQ_KEPT_PRESTART stops before the
 * layer (1: started or running). */
int sq_kept_serve(struct sq_container *c, const struct sq_start_request *req,
		  const struct sq_kept_step *s, const char **served, char *note, size_t notelen,
		  char *err, size_t errlen);

/* The kept container's key for a start request (sq_life_key over the runtime, target,
 * image identity, flags, conf and rc text, and environment). 0 ok, -1 unreadable. */
int sq_kept_key(const struct sq_start_request *r, const char *identity, char key[33]);

/* Hold the job's kept container for r->key in c (its first process, user, mount and
 * cgroup namespaces, root, working directory, environment), starting it when none
 * answers (unless r->join_only). *started: 1 when this step started it; its keeper is then
 * recorded for the job epilog before the lock is let go (a job prolog's start can outrun
 * its job: the epilog waits for the lock, then finds the record). 0 ok; 1 none answers
 * (join_only); -1 with err. */
int sq_kept_attach(struct sq_container *c, const struct sq_kept_request *r, int *started,
		   char *err, size_t errlen);

#endif
