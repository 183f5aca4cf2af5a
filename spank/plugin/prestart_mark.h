/*
 * prestart_mark.h: the marker of a job whose prolog started its container on the node
 * (prestart.h), in the user's runtime directory: jobJOB.prestart, written by the prolog's
 * start (as the user) before it takes the kept container's lock, so that every step of the
 * job that comes after the prolog finds it. It holds how the container is being started
 * (kept.c's words for the verbose log: from the image or the node's extracted copy), which
 * a step that joins it reports. The job epilog removes it.
 */
#ifndef SQUALL_PLUGIN_PRESTART_MARK_H
#define SQUALL_PLUGIN_PRESTART_MARK_H

#include <stddef.h>
#include <stdint.h>

/* The marker's name in the runtime directory: jobJOB.SQ_PRESTART_MARK */
#define SQ_PRESTART_MARK "prestart"

/* Write it (how: one line). 0 ok, -1 not written (the steps then start their own). */
int sq_prestart_mark(const char *runtime_dir, uint32_t jobid, const char *how);
/* 1 when it is there (a regular file): how gets its text ("" when empty); 0 none. */
int sq_prestart_marked(const char *runtime_dir, uint32_t jobid, char *how, size_t howlen);

#endif
