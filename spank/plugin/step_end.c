/*
 * step_end.c: the end of a container step (step.h): after the node's last task, the save
 * and what the step made for itself; at slurmstepd's exit, the container.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "env.h"
#include "layer_record.h"
#include "records.h"
#include "named.h"
#include "promfile.h"
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
	sq_datasets_end(&s->datasets);
	sq_nsholder_release(&s->holder);
	snprintf(what, sizeof(what), "%u", (unsigned)s->stepid);
	if (owned)
		sq_record_forget(s->runtime_dir, s->jobid, what);
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

/*
 * --container-save must fail the step when it fails, and Slurm reads a step's status from
 * its tasks' exits before it calls task_exit (whose return it ignores). So on node 0 each
 * task runs under a guard: the process Slurm started forks before the task joins the
 * container; the child goes on to be the task, the guard (the user, outside the
 * container) waits for it. The guard that sees the node's last task end saves, says the
 * outcome on the task's stderr (srun's), and exits with the task's status, or 1 when the
 * task succeeded and the save failed. Slurm signals the processes slurmstepd started
 * (proctrack/cgroup sends all but SIGKILL to those alone), so a guard passes each signal it
 * can catch on to its task. Without a guard (fork failed) slurmstepd saves after the last
 * task, as before, an error line only.
 */
struct sq_save_shared {
	uint32_t started;   /* tasks that joined the container */
	uint32_t ended;     /* guards whose task has ended */
	uint32_t tried;     /* a guard saved, or tried to */
};

int sq_step_save_prepare(struct sq_step *s)
{
	void *m;

	if (s->save_path == NULL || s->nodeid != 0 || s->save_shm != NULL)
		return 0;
	m = mmap(NULL, sizeof(struct sq_save_shared), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return sq_report_fail("--container-save: cannot map shared memory");
	memset(m, 0, sizeof(struct sq_save_shared));
	s->save_shm = m;
	return 0;
}

void sq_step_save_started(struct sq_step *s)
{
	if (s->save_shm != NULL)
		__atomic_add_fetch(&s->save_shm->started, 1, __ATOMIC_SEQ_CST);
}

/* The guard's save: 0 saved or not to save, -1 failed (said on stderr). */
static int guard_save(struct sq_step *s, uint32_t local_tasks)
{
	const struct sq_runtime rt = { s->enroot, s->runtime_env, NULL };
	const char *container = s->save_container ? s->save_container : s->target;
	char err[SQ_ERR_LEN];

	if (__atomic_add_fetch(&s->save_shm->ended, 1, __ATOMIC_SEQ_CST) != local_tasks ||
	    __atomic_load_n(&s->save_shm->started, __ATOMIC_SEQ_CST) != local_tasks ||
	    container == NULL)
		return 0;
	__atomic_store_n(&s->save_shm->tried, 1, __ATOMIC_SEQ_CST);
	if (sq_save_export(&rt, container, s->save_path, s->jobid, s->stepid, err,
			   sizeof(err)) < 0) {
		dprintf(STDERR_FILENO, "squall: error: --container-save=%s: %s\n", s->save_path,
			err);
		return -1;
	}
	dprintf(STDERR_FILENO, "squall: exported the container to %s\n", s->save_path);
	return 0;
}

/* The guard's exit: the task's status, made a failure when the save failed. */
static void guard_exit(int status, int save_rc)
{
	if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		raise(WTERMSIG(status));
		_exit(128 + WTERMSIG(status));
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		_exit(WEXITSTATUS(status));
	_exit(save_rc < 0 ? 1 : 0);
}

static volatile pid_t guarded = -1;

static void pass_on(int sig)
{
	if (guarded > 0)
		kill(guarded, sig);
}

void sq_step_save_guard(struct sq_step *s, spank_t sp)
{
	static const int passed[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
				      SIGALRM, SIGCONT, SIGTSTP, SIGTTIN, SIGTTOU, SIGWINCH };
	struct sigaction sa;
	uint32_t local_tasks = 0;
	int status = 0;
	pid_t pid, r;

	if (s->save_shm == NULL ||
	    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks) != ESPANK_SUCCESS)
		return;
	pid = fork();
	if (pid <= 0)
		return;   /* the task (or no guard: slurmstepd saves) */
	guarded = pid;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = pass_on;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
		sigaction(passed[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	do {
		r = waitpid(pid, &status, 0);
	} while (r < 0 && errno == EINTR);
	if (r != pid)
		_exit(1);
	guard_exit(status, guard_save(s, local_tasks));
}

/* --container-save, once per step: on node 0, after its last task, where no guard did it.
 * The container's files are on disk (a created container), so its stopped first process
 * does not matter. */
static int save_container(struct sq_step *s)
{
	struct sq_runtime rt = { s->enroot, s->runtime_env, &s->cred_root };
	const char *container = s->save_container ? s->save_container : s->target;
	char err[SQ_ERR_LEN];

	if (s->save_path == NULL || s->nodeid != 0 || sq_report_failed() || s->saved || container == NULL)
		return 0;
	s->saved = 1;
	if (s->save_shm != NULL && __atomic_load_n(&s->save_shm->tried, __ATOMIC_SEQ_CST))
		return 0;
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

/* The phases user_init timed, summed into the metrics' four (core/metrics.h); 1 when the
 * step joined a container another step runs. */
static int timed_phases(struct sq_metrics_step *m)
{
	const char *names[16];
	double ms[16];
	size_t n = sq_phase_list(names, ms, 16);
	int joined = 0;

	for (size_t i = 0; i < n; i++) {
		int ph = sq_metrics_phase_of(names[i]);
		if (ph < 0)
			continue;
		if (m->phase_s[ph] < 0)
			m->phase_s[ph] = 0;
		m->phase_s[ph] += ms[i] / 1000.0;
		joined |= strcmp(names[i], "join running container") == 0;
	}
	return joined;
}

/* Count the step in the node's metrics (promfile.h), as root, once per node. */
static void count_step(struct sq_step *s)
{
	struct sq_metrics_step m;
	char err[SQ_ERR_LEN];
	struct stat st;
	int joined, ok = 0;
	double join_s = -1;

	if (s->cfg->metrics_dir == NULL)
		return;
	sq_metrics_step_init(&m);
	joined = timed_phases(&m);
	m.build = s->build;
	m.build_s = s->build_s;
	if (sq_metrics_join_read(s->join_fd[0], &ok, &join_s) && ok)
		m.phase_s[SQ_MPH_JOIN] = join_s;
	if (sq_report_failed()) {
		m.reason = sq_metrics_reason_of(s->stage, sq_report_pending());
	} else if (join_s >= 0 && !ok) {
		m.reason = SQ_MREASON_JOIN;
	} else {
		m.source = sq_metrics_source_of(s->served, joined, s->cache_dir[0] != '\0',
						&m.local_copy);
		if (m.source == SQ_MSRC_IMAGE && s->image.path != NULL &&
		    stat(s->image.path, &st) == 0 && st.st_size > 0)
			m.image_bytes = (uint64_t)st.st_size;
	}
	if (sq_metrics_update(SQ_METRICS_STATE, s->cfg->metrics_dir, &m, err, sizeof(err)) != 0)
		slurm_info("squall: metrics: %s", err);
}

/* slurmstepd's exit: count the step in the node's metrics, stop the container, remove the
 * step's own, free the step. */
void sq_step_exit(struct sq_step *s)
{
	char err[SQ_ERR_LEN];

	if (!s->active)
		return;
	/* Counted first: stopping the container may take a while (the keeper ends it), and
	 * the step's numbers are all known by now. */
	count_step(s);
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
	for (int i = 0; i < 2; i++) {
		if (s->join_fd[i] >= 0)
			close(s->join_fd[i]);
		s->join_fd[i] = -1;
	}
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
	if (s->save_shm != NULL)
		munmap(s->save_shm, sizeof(struct sq_save_shared));
	s->save_shm = NULL;
}
