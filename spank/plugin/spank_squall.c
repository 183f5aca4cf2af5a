/*
 * spank_squall.c: the SPANK callbacks, each routed to the file that owns its phase.
 *
 *   init          all contexts: plugstack arguments (refuse to load on a bad one),
 *                 register the flags in srun, sbatch/salloc and slurmstepd (args.h)
 *   init_post_opt srun/sbatch: the flags' final check, errors on the terminal (client.h)
 *                 slurmstepd (root): is this a container step; the per-user runtime
 *                 directory (step.h)
 *   user_init     slurmstepd, as the user, before any task: prepare, resolve the image or
 *                 join a running container, configure, start or keep (step.h)
 *   task_init     each task, as the user, before exec: raise a kept error, or join the
 *                 container and take its environment (step.h)
 *   task_exit     slurmstepd, after the node's last task: --container-save on node 0, then
 *                 the step's own container and the importer's file go (step.h)
 *   exit          slurmstepd: stop the container (and the namespace holder) (step.h)
 *   job_prolog    slurmd: with --container-prestart, start the job's container on the
 *                 node for its first step to join (prestart.h)
 *   job_epilog    slurmd: end what the job's steps left, remove its named containers
 *                 (epilog.h)
 */
#include <slurm/spank.h>

#include "args.h"
#include "client.h"
#include "config.h"
#include "epilog.h"
#include "image_record.h"
#include "pinmemo.h"
#include "prestart.h"
#include "report.h"
#include "step.h"

SPANK_PLUGIN(squall, 1)

static struct sq_config cfg;
static int cfg_ready;
/* The one step a slurmstepd runs: SPANK callbacks carry no data of their own. */
static struct sq_step step;

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[SQ_ERR_LEN];
	spank_context_t ctx = spank_context();

	if (sq_config_parse(&cfg, ac, av, err, sizeof(err)) < 0) {
		slurm_error("squall: %s", err);
		if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR)
			sq_report_now("squall: error: ", "%s", err);
		return -1;
	}
	cfg_ready = 1;
	sq_step_init(&step, &cfg, &sq_args);
	if (ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE || ctx == S_CTX_ALLOCATOR)
		return sq_args_register(sp);
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return sq_client_post_opt(sp);
	case S_CTX_REMOTE:
		sq_step_post_opt(&step, sp);
		return 0;
	default:
		return 0;
	}
}

/* The image the step's container runs from, for the site's admins (image_record.h). */
static void note_image(const struct sq_step *s)
{
	const struct sq_jobrecord r = { s->jobid, s->stepid, s->nodeid, s->opt->image,
					s->image.path, s->image.from_registry };

	sq_jobrecord_note(&r);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE || !step.active || sq_report_failed())
		return 0;
	sq_step_user_init(&step, sp);
	/* Errors are raised in task_init, where they reach srun. */
	if (!sq_report_failed())
		note_image(&step);
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	return sq_step_task_init(&step, sp);
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return sq_step_task_exit(&step, sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	if (spank_context() == S_CTX_REMOTE)
		sq_step_exit(&step);
	return 0;
}

/* Slurm does not call slurm_spank_init before the job prolog and epilog: read the
 * plugstack arguments there. 0 ok, -1 (logged). */
static int job_script_config(int ac, char **av)
{
	char err[SQ_ERR_LEN];

	if (cfg_ready)
		return 0;
	if (sq_config_parse(&cfg, ac, av, err, sizeof(err)) < 0) {
		slurm_error("squall: %s", err);
		return -1;
	}
	cfg_ready = 1;
	return 0;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	/* Never fail the prolog (a failed one drains the node): the job's first step
	 * starts its container as without --container-prestart. */
	if (job_script_config(ac, av) == 0)
		sq_prestart_prolog(&cfg, sp);
	return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	uint32_t jobid;

	if (job_script_config(ac, av) < 0)
		return -1;
	sq_epilog_run(&cfg, sp);
	if (spank_get_item(sp, S_JOB_ID, &jobid) == ESPANK_SUCCESS)
		sq_pinmemo_drop_job(SQ_PINMEMO_DIR, jobid);
	return 0;
}

int slurm_spank_slurmd_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	if (cfg_ready)
		sq_config_free(&cfg);
	return 0;
}
