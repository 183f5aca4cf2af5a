/*
 * join.c: a step that joins a container another step runs on this node, instead of
 * starting one (step.h): by --container-name NAME (named.h finds its record) or by
 * --container-name=JOBID.STEPID (that step's record, and its layer on the job's kept
 * container, kept.h, or on the container it started, layer.h). A named container is joined
 * in its shared layer (layer.h). What was joined is held in the step's container and namespace
 * holder, which task_init enters as it enters a started one.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "layer_record.h"
#include "named.h"
#include "options.h"
#include "reap.h"
#include "report.h"
#include "running.h"
#include "step.h"
#include "strbuf.h"
#include "unshare.h"

/* Flags that only shape a container being started: joining one, they cannot apply. One
 * line each, in Pyxis's words, which scripts grep ("ignoring --container-mounts"). */
static void warn_ignored_on_join(struct sq_step *s, const char *joined)
{
	static const struct { int id; const char *flag; } shaping[] = {
		{ SQ_OPT_MOUNTS, "--container-mounts" },
		{ SQ_OPT_MOUNT_HOME, "--[no-]container-mount-home" },
		{ SQ_OPT_REMAP_ROOT, "--[no-]container-remap-root" },
		{ SQ_OPT_ENTRYPOINT, "--[no-]container-entrypoint" },
		{ SQ_OPT_WRITABLE, "--container-writable/readonly" },
		{ SQ_OPT_EFA, "--container-efa" },
		{ SQ_OPT_NCCL_DEBUG, "--container-nccl-debug" },
	};
	char line[1024];

	for (size_t i = 0; i < sizeof(shaping) / sizeof(shaping[0]); i++) {
		if (s->opt->source[shaping[i].id] == SQ_SRC_NONE)
			continue;
		snprintf(line, sizeof(line), "squall: warning: ignoring %s when attaching to a "
			 "running container (--container-name=%s joined %s on this node; it was "
			 "set when that container started)", shaping[i].flag, s->opt->name, joined);
		sq_report_warn(line);
	}
}

/* --container-unshare when joining a running container: it must have those namespaces. */
static int check_joined_unshare(struct sq_step *s)
{
	char want[32], err[SQ_ERR_LEN];
	int missing = s->opt->unshare & ~sq_nsholder_mask(&s->holder);

	if (missing == 0)
		return 0;
	sq_errf(err, sizeof(err), "--container-unshare=%s: the running container of "
		"--container-name=%s is not in a separate %s namespace (it was started without "
		"it): drop --container-unshare to join it, or start the container with it",
		sq_unshare_str(s->opt->unshare, want, sizeof(want)), s->opt->name,
		missing & SQ_NS_NET ? "network" : missing & SQ_NS_IPC ? "IPC" : "UTS");
	return sq_report_fail(err);
}

/* Join the container (and its unshared namespaces) whose first process is pid.
 * 1 joined, 0 it is gone (start one), -1 failed (error kept). */
static int attach_container(struct sq_step *s, const char *runtime_name, pid_t pid,
			    unsigned long long start, pid_t nspid, unsigned long long nsstart)
{
	char err[SQ_ERR_LEN], msg[SQ_ERR_LEN];
	int r;

	r = sq_container_attach(&s->ctr, pid, start, err, sizeof(err));
	if (r == 1) {
		sq_running_forget(s->runtime_dir, runtime_name, pid);
		return 0;
	}
	if (r == 0 && nspid > 0) {
		r = sq_nsholder_attach(&s->holder, nspid, nsstart, s->ctr.ns_user, err,
				       sizeof(err));
		if (r == 1) {
			r = sq_errf(err, sizeof(err), "the process holding its unshared "
				    "namespaces (--container-unshare) is gone");
		}
	}
	if (r < 0) {
		sq_errf(msg, sizeof(msg), "--container-name=%s: cannot join the container that "
			"runs on this node: %s", s->opt->name, err);
		sq_container_stop(&s->ctr);
		return sq_report_fail(msg);
	}
	if (check_joined_unshare(s) < 0)
		return -1;
	if ((s->target = strdup(runtime_name)) == NULL)
		return sq_report_fail("out of memory");
	warn_ignored_on_join(s, runtime_name);
	return 1;
}

/* The tasks of a running named container run in its shared layer (layer.h): join it,
 * through one of its processes, once sure the recorded number still names a namespace of
 * that container (owned by its user namespace, held while joined). None found (its tasks
 * have not started, or are gone): the container's own namespace. */
static void enter_named_layer(struct sq_step *s)
{
	unsigned long long dev, ino, held_dev, held_ino;
	char err[SQ_ERR_LEN];
	long pid;
	int pin;

	if (sq_layer_read_named(s->runtime_dir, s->run_name, &dev, &ino) < 0)
		return;
	pin = sq_mntns_pin_owned(dev, ino, (long)s->uid, s->ctr.ns_mnt);
	if (pin < 0)
		return;
	pid = sq_mntns_find(dev, ino, (long)s->uid);
	if (pid > 0 && sq_container_use_layer(&s->ctr, (pid_t)pid, err, sizeof(err)) < 0)
		slurm_info("squall: --container-name=%s: %s", s->opt->name, err);
	else if (pid > 0 && (sq_mntns_fd_id(s->ctr.ns_mnt, &held_dev, &held_ino) < 0 ||
			     held_dev != dev || held_ino != ino))
		/* The process found left between the lookup and the open: what was opened is
		 * not the layer. */
		sq_container_use_layer(&s->ctr, s->ctr.pid, err, sizeof(err));
	close(pin);
}

int sq_step_join_named(struct sq_step *s)
{
	char err[SQ_ERR_LEN], warn[1024];
	const struct sq_named_query q = {
		s->runtime_dir, s->run_name, s->opt->name, s->opt->name_mode,
		s->cfg->container_name_strict,
		{ s->opt->image, NULL, NULL, s->opt->image ? s->image.identity : NULL } };
	struct sq_named_found f = { -1, 0, 0, 0 };
	int r;

	r = sq_named_find_running(&q, &f, warn, sizeof(warn), err, sizeof(err));
	if (r < 0)
		return sq_report_fail(err);
	if (r == 0)
		return 0;
	sq_report_warn(warn);
	r = attach_container(s, s->run_name, f.pid, f.starttime, f.nspid, f.nsstart);
	if (r == 1)
		enter_named_layer(s);
	if (r == 0 && s->opt->name_mode == SQ_NAME_EXEC) {
		sq_named_exec_none(s->opt->name, err, sizeof(err));
		return sq_report_fail(err);
	}
	return r;
}

/* A step served by the job's kept container (kept.h) runs in a layer of its own: join that
 * layer's mount namespace, through one of the step's processes, as its tasks see it.
 * 1 joined (or the step had no layer), -1 failed (error kept). */
static int attach_step_layer(struct sq_step *s, uint32_t jobid, uint32_t stepid)
{
	unsigned long long dev, ino;
	char err[SQ_ERR_LEN];
	long pid;

	if (sq_layer_read(s->runtime_dir, jobid, stepid, &dev, &ino) < 0)
		return 1;
	pid = sq_mntns_find(dev, ino, (long)s->uid);
	if (pid < 0 || sq_container_use_layer(&s->ctr, (pid_t)pid, err, sizeof(err)) < 0) {
		sq_errf(err, sizeof(err), "--container-name=%s: step %u.%u runs no task in its "
			"container on this node any more", s->opt->name, (unsigned)jobid,
			(unsigned)stepid);
		return sq_report_fail(err);
	}
	return 1;
}

/* As Pyxis attaches to an unnamed container (srun --overlap). */
int sq_step_attach_step(struct sq_step *s, uint32_t jobid, uint32_t stepid)
{
	char name[64], err[SQ_ERR_LEN];
	unsigned long long start, nsstart;
	pid_t pid, nspid;

	sq_named_step_name(jobid, stepid, name, sizeof(name));
	if (sq_running_live(s->runtime_dir, name) &&
	    sq_running_read_ns(s->runtime_dir, name, &pid, &start, &nspid, &nsstart) == 0 &&
	    attach_container(s, name, pid, start, nspid, nsstart) != 0)
		return sq_report_failed() ? -1 : attach_step_layer(s, jobid, stepid);
	if (sq_report_failed())
		return -1;
	sq_errf(err, sizeof(err), "--container-name=%s: step %u.%u runs no container of yours "
		"on this node (give a running step's JOBID.STEPID, with srun --overlap)",
		s->opt->name, (unsigned)jobid, (unsigned)stepid);
	return sq_report_fail(err);
}
