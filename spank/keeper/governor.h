/*
 * governor.h: the node-local cache's extraction, yielding to the step beside it
 * (nodecache.h "Yielding to the step": the decision, sq_yield_next, is pure and in the core).
 */
#ifndef SQUALL_PLUGIN_GOVERNOR_H
#define SQUALL_PLUGIN_GOVERNOR_H

/* Run argv (the extractor) with stdout on out_fd (or /dev/null), in a process group of its
 * own, at SCHED_IDLE, nice 19 and ioprio idle, killed when this process dies (it may be
 * stopped then); SIGCONT / SIGSTOP in a duty cycle decided by sq_yield_next each period.
 * Returns its wait status, -1 when it could not be started. */
int sq_run_governed(char *const argv[], int out_fd);

/* The same, its first period at *duty (SQ_YIELD_FLOOR..SQ_YIELD_FULL), *duty left at the
 * duty of its last period: an extraction's listing and its run go on in one cycle, and a
 * resumed extraction starts at full speed (it yields from the first period in which other
 * work shows) instead of at the floor. */
int sq_run_governed_at(char *const argv[], int out_fd, int *duty);

#endif
