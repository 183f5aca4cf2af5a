/*
 * running.h: which named containers have a running instance on this node.
 *
 * The step that starts a container leaves a record beside its runtime files,
 * <runtime_dir>/running-<runtime name>, holding the first process's PID and start time
 * (procstat.h), and those of the process that holds its unshared namespaces, if any
 * (unshare.h). Every container step records itself as pyxis_JOBID.STEPID (for
 * --container-name=JOBID.STEPID), a named one also under its name. A later step of the
 * same user finds it there and joins that process's namespaces (container.h attach)
 * instead of starting another instance. The record goes when its step stops the
 * container, or with the job epilog when its slurmstepd was killed; a stale one (its
 * process gone, or a reused PID) is simply not matched. Records are read without
 * following links and only when they are regular files (core/safeopen.h).
 */
#ifndef SQUALL_PLUGIN_RUNNING_H
#define SQUALL_PLUGIN_RUNNING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Write the record atomically (temp file + rename), unless a record of a live process
 * is there already: the first instance stays the one to join. 0 ok, -1 with err. */
int sq_running_record(const char *dir, const char *name, pid_t pid,
		      unsigned long long starttime, pid_t nspid, unsigned long long nsstart,
		      char *err, size_t errlen);
/* Read one record. 0 ok, -1 none or unreadable. */
int sq_running_read(const char *dir, const char *name, pid_t *pid,
		    unsigned long long *starttime);
/* The same with the namespace holder (0 when none). */
int sq_running_read_ns(const char *dir, const char *name, pid_t *pid,
		       unsigned long long *starttime, pid_t *nspid, unsigned long long *nsstart);
/* 1 when the record names a process that still runs (same PID, same start time). */
int sq_running_live(const char *dir, const char *name);
/* Remove the record if it still names pid (another step may have replaced it). */
void sq_running_forget(const char *dir, const char *name, pid_t pid);
/* Job epilog, as root: remove the records of job jobid that its steps left (a killed
 * slurmstepd never forgets its own): running-pyxis_JOBID.STEPID and their temp files, and
 * with scope_job (container_scope=job) running-pyxis_JOBID_NAME. Only regular files, found
 * and unlinked relative to dirfd (the user's runtime directory, opened O_NOFOLLOW and
 * checked). Returns how many were removed. */
int sq_running_sweep_job(int dirfd, uint32_t jobid, int scope_job);

#endif
