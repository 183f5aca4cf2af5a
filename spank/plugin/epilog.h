/*
 * epilog.h: slurmd's job epilog (slurm_spank_job_epilog), as root, after the job: the
 * containers its steps left running end (their keepers' records, records.h), the records
 * a killed slurmstepd could not remove go (running.h), and with container_scope=job the
 * job's named containers, pyxis_JOBID_*, are removed where a step left the marker.
 */
#ifndef SQUALL_PLUGIN_EPILOG_H
#define SQUALL_PLUGIN_EPILOG_H

#include <slurm/spank.h>

#include "config.h"

/* Problems go to slurmd's log: the epilog never fails the job. */
void sq_epilog_run(const struct sq_config *cfg, spank_t sp);

#endif
