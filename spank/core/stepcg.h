/*
 * stepcg.h: the step's process-tracking cgroup, for what slurmstepd starts before the
 * step's tasks (the image builder) to end with the step.
 *
 * With proctrack/cgroup on cgroup v1, slurmstepd sits in the job's freezer cgroup
 * (.../uid_U/job_J) and Slurm signals the step's (.../job_J/step_S) when it ends or is
 * cancelled, so a child slurmstepd forks in user_init outlives scancel (seen: a build went
 * on and the node stayed COMPLETING). A child that joins step_S dies with the step. On
 * cgroup v2 slurmstepd already sits inside the step's cgroup (step_S/slurm), so its children
 * are the step's: nothing to join (the result is "").
 */
#ifndef SQUALL_CORE_STEPCG_H
#define SQUALL_CORE_STEPCG_H

#include <stddef.h>

/* From the text of /proc/self/cgroup and /proc/self/mountinfo: the path of the
 * cgroup.procs file of this job's step `step` (e.g. "step_0", "step_batch") in the v1
 * freezer hierarchy, when this process is in a job's freezer cgroup (its path ends in
 * "/job_<digits>") and that hierarchy is mounted; else "". 0 with out set (maybe ""),
 * -1 when out is too small. Pure: nothing is read or checked on disk. */
int sq_stepcg_procs(const char *cgroup, const char *mountinfo, const char *step, char *out,
		    size_t outlen);

#endif
