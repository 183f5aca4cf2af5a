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

#endif
