/*
 * records.h: the keeper's records and the job epilog's sweep of them.
 *
 * A running keeper (keeper_client.h) is recorded in the user's runtime directory as
 * DIR/keeper-JOBID.WHAT (WHAT: the step id, or kept-KEY for a container kept for the job),
 * its PID and start time, so that the job epilog ends whatever a step left running when its
 * slurmstepd died. The steps' layers have records of their own (layer_record.h), which the
 * sweep reads too.
 */
#ifndef SQUALL_PLUGIN_RECORDS_H
#define SQUALL_PLUGIN_RECORDS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Record the keeper pid, started at starttime (clock ticks, /proc/PID/stat). 0 ok; -1 with
 * err. */
int sq_record_keeper(const char *dir, uint32_t jobid, const char *what, pid_t pid,
		     unsigned long long starttime, char *err, size_t errlen);
void sq_record_forget(const char *dir, uint32_t jobid, const char *what);

/* Job epilog, as root: end every container the job's records in dirfd (the user's runtime
 * directory, opened O_NOFOLLOW and checked) still name (keeper, runtime, everything of uid
 * in its session and its mount namespaces) and remove the records, every process of uid
 * left in a recorded layer's mount namespace, and the job's kept-JOBID-* sockets and locks.
 * Records are the user's files: read only when regular (never a FIFO, never through a
 * link), relative to dirfd. Returns how many were running. */
int sq_records_sweep_job(int dirfd, uint32_t jobid, uid_t uid);

#endif
