/*
 * step_end.c: the end of a container step (step.h): after the node's last task, the save
 * and what the step made for itself; at slurmstepd's exit, the container.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "env.h"
#include "keeper.h"
#include "named.h"
#include "report.h"
#include "running.h"
#include "save.h"
#include "step.h"

/* Does the named container's running record name this step's container (the first
 * instance, whose layer the joining steps are told of)? */
static int running_is_ours(const struct sq_step *s)
{
	unsigned long long start;
	pid_t pid;

	return sq_running_read(s->runtime_dir, s->run_name, &pid, &start) == 0 &&
	       pid == s->ctr.pid && start == s->ctr.starttime;
}

void sq_step_stop_container(struct sq_step *s)
{
	int owned = s->ctr.owned, kept = s->ctr.kept;
	char what[16];

	if (owned || kept) {
		sq_running_forget(s->runtime_dir, s->step_name, s->ctr.pid);
		if (owned && s->opt->name != NULL && s->run_name[0]) {
			if (running_is_ours(s))
				sq_layer_forget_named(s->runtime_dir, s->run_name);
			sq_running_forget(s->runtime_dir, s->run_name, s->ctr.pid);
		}
	}
	sq_container_stop(&s->ctr);
	sq_nsholder_release(&s->holder);
	snprintf(what, sizeof(what), "%u", (unsigned)s->stepid);
	if (owned)
		sq_keeper_forget(s->runtime_dir, s->jobid, what);
	if (owned || kept)
		sq_layer_forget(s->runtime_dir, s->jobid, s->stepid);
}

/* The importer's `release`, the second time (Pyxis's protocol), then forget it. As root
 * (after the tasks), it runs as the user with the user's groups. */
static void release_importer(struct sq_step *s)
{
	if (s->importer.envp == NULL)
		return;
	s->importer.cred = &s->cred_root;
	sq_importer_release(&s->importer);
	sq_importer_free(&s->importer);
}

/* --container-save, once per step: on node 0, after its last task. The container's files
 * are on disk (a created container), so its stopped first process does not matter. */
static int save_container(struct sq_step *s)
{
	struct sq_runtime rt = { s->enroot, s->runtime_env, &s->cred_root };
	const char *container = s->save_container ? s->save_container : s->target;
	char err[SQ_ERR_LEN];

	if (s->save_path == NULL || s->nodeid != 0 || sq_report_failed() || s->saved || container == NULL)
		return 0;
	s->saved = 1;
	if (sq_save_export(&rt, container, s->save_path, s->jobid, s->stepid, err,
			   sizeof(err)) < 0) {
		slurm_error("squall: --container-save=%s: %s", s->save_path, err);
		return -1;
	}
	/* On srun's stderr (info goes only to slurmd's log): where it was written, as
	 * Pyxis says where it exported. */
	slurm_spank_log("squall: exported the container to %s", s->save_path);
	return 0;
}

/* When the node's last task has exited: the save, then what the step made for itself (its
 * own container, the importer's file). Done here rather than in exit because Slurm kills
 * every process left in the step (ours included) once the tasks are gone. */
int sq_step_task_exit(struct sq_step *s, spank_t sp)
{
	uint32_t local_tasks = 0;
	struct sq_runtime rt = { s->enroot, s->runtime_env, &s->cred_root };
	char err[SQ_ERR_LEN];
	int rc;

	if (!s->active)
		return 0;
	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks) != ESPANK_SUCCESS ||
	    ++s->exited < local_tasks)
		return 0;
	rc = save_container(s);
	/* The step's own container is not needed any more: stop it (the runtime refuses to
	 * remove a running one) and remove it now. */
	if (s->save_container != NULL) {
		sq_step_stop_container(s);
		if (sq_named_remove(&rt, s->save_container, err, sizeof(err)) == 0) {
			free(s->save_container);
			s->save_container = NULL;
		} else {
			slurm_error("squall: cannot remove the step's container %s: %s",
				    s->save_container, err);
		}
	}
	release_importer(s);
	return rc;
}

/* slurmstepd's exit: stop the container, remove the step's own, free the step. */
void sq_step_exit(struct sq_step *s)
{
	char err[SQ_ERR_LEN];

	if (!s->active)
		return;
	sq_step_stop_container(s);
	if (s->conf_path[0])
		unlink(s->conf_path);
	if (s->save_container != NULL) {
		struct sq_runtime rt = { s->enroot, s->runtime_env, &s->cred_root };
		if (sq_named_remove(&rt, s->save_container, err, sizeof(err)) < 0)
			slurm_error("squall: cannot remove the step's container %s: %s",
				    s->save_container, err);
	}
	release_importer(s);
	sq_env_free(s->runtime_env);
	s->runtime_env = NULL;
	free(s->target);
	free(s->save_container);
	free(s->enroot);
	free(s->save_path);
	free(s->load_uri);
	s->target = s->save_container = s->enroot = s->save_path = s->load_uri = NULL;
	sq_image_free(&s->image);
	sq_cred_free(&s->cred_root);
}
