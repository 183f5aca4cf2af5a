/*
 * container.h: the per-node container of a step -- start, join, stop. The only module
 * that knows how a container is held; keeping one alive for a whole job later changes
 * this file alone.
 *
 * start: `enroot start [--rw] [--root] [--conf FILE] [--rc FILE] TARGET
 *        sh -c 'kill -STOP $$; exit 0'`
 *        as the job user, under squall-keeper (keeper_client.h: outside slurmstepd's process
 *        tree, job signals ignored); when that shell has stopped itself the container is
 *        fully set up. It is then held by a pidfd and by descriptors on its user, mount and cgroup
 *        namespaces, its root and its working directory, and its environment is read.
 * join:  in each task before exec: setns user, mount, cgroup; chroot to the held root;
 *        chdir to the workdir (or the container's own working directory).
 * attach: hold a container another step started and still runs (a named container's
 *        first process, found through running.h), by its PID and start time: the same
 *        descriptors as after a start, but not owned.
 * stop:  owned: the keeper lets the shell exit 0 (SIGCONT) so the runtime tears down its
 *        mounts, SIGKILLs it if it does not go within the grace time, and ends whatever
 *        the runtime left in its session.
 *        attached: the descriptors are closed; the owner's step decides its end.
 */
#ifndef SQUALL_PLUGIN_CONTAINER_H
#define SQUALL_PLUGIN_CONTAINER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "keeper_client.h"
#include "runcmd.h"

struct sq_container {
	pid_t pid;              /* for messages only; use pidfd */
	unsigned long long starttime;  /* with pid: names the process for a later attach */
	int owned;              /* 1: this step started it and stops it */
	int pidfd;
	int ns_user;            /* -1 when the container shares ours */
	int ns_mnt;
	int ns_cgroup;
	int root_fd;
	int cwd_fd;
	char *environ;          /* /proc/PID/environ block, NUL-separated */
	size_t environ_len;
	struct sq_child child;  /* the runtime's captured output */
	struct sq_keeper keeper;  /* the process that holds the runtime (keeper_client.h) */
	uid_t uid;              /* owned: the job user */
	int kept;               /* the job's kept container (kept.h): "bye" at step end */
	int layer;              /* 1: ns_mnt is a step's layer (sq_container_use_layer), */
	unsigned long long layer_dev, layer_ino;  /* named by these (layer_record.h) */
};

struct sq_start_request {
	const char *keeper;     /* squall-keeper, which runs the runtime (keeper_client.h) */
	const char *enroot;     /* runtime executable */
	const char *conf_path;  /* NULL: no --conf */
	const char *rc_path;    /* NULL: no --rc (the image's /etc/rc runs) */
	const char *target;     /* image file or created container name */
	int writable;           /* 1: --rw */
	int remap_root;         /* 1: --root */
	char *const *envp;      /* the runtime's environment */
	const struct sq_cred *cred;
	int timeout_s;          /* give up when the shell has not stopped by then (0: never) */
	const char *const *keeper_args;  /* NULL, or the keeper's own (kept.h: --job ...) */
};

void sq_container_init(struct sq_container *c);
/* 0 ok; -1 with err "container start failed (...): <runtime's last lines>". */
int sq_container_start(struct sq_container *c, const struct sq_start_request *r,
		       char *err, size_t errlen);
/* Hold the running container whose first process is pid, started at starttime (clock
 * ticks since boot, /proc/PID/stat). 0 ok; 1 when that process is gone (nothing held);
 * -1 with err when it is there but cannot be held. */
int sq_container_attach(struct sq_container *c, pid_t pid, unsigned long long starttime,
			char *err, size_t errlen);
/* The job's kept container (kept.h). Attach: ask the keeper at the other end of sock (taken
 * over, closed on failure) for the container and hold it for uid. Start: start it under a
 * keeper kept for the job (r->keeper_args "--job ..."). Either way the container is kept,
 * not owned by the step. 0 ok; -1 with err. */
int sq_container_attach_kept(struct sq_container *c, int sock, uid_t uid, char *err,
			     size_t errlen);
int sq_container_start_kept(struct sq_container *c, const struct sq_start_request *r,
			    char *err, size_t errlen);
/* Hold the mount namespace and root of process pid (a step's layer, layer.h) instead of
 * the container's, with the container's working directory found again under that root,
 * and tell the container's keeper which namespace it is; c->layer_dev and c->layer_ino
 * then name it (the step records them, layer_record.h). 0 ok; -1 with err. */
int sq_container_use_layer(struct sq_container *c, pid_t pid, char *err, size_t errlen);
/* In a task, before exec. workdir NULL: the container's working directory; relative:
 * from there. */
int sq_container_join(const struct sq_container *c, const char *workdir, char *err, size_t errlen);
/* Release everything and leave c as sq_container_init does (it may start again); safe on
 * a container that never started. */
void sq_container_stop(struct sq_container *c);
/* 1 while the held process is alive (stopped counts). */
int sq_container_alive(const struct sq_container *c);

#endif
