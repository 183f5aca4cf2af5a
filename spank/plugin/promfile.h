/*
 * promfile.h: the node's metrics files (docs/metrics.md), as root from slurmstepd at each
 * container step's end (step_end.c); the record and its text are the core's
 * (core/metrics.h).
 *
 *   STATE/record        the node's counters, a fixed-size binary record (0600, root's),
 *                       in STATE (SQ_METRICS_STATE: made root's, 0700): read, added to and
 *                       written back in place under an exclusive flock, so that steps that
 *                       end together never lose a count. A record that cannot be read
 *                       starts again from zero, counted (squall_metrics_resets_total).
 *   TEXTFILE/squall.prom  node_exporter's textfile (plugstack metrics_dir=): rendered
 *                       under the same lock into .squall.prom.PID (O_EXCL, O_NOFOLLOW,
 *                       0644; not *.prom, which node_exporter would read half written),
 *                       then renamed over squall.prom. A full disk or a directory others
 *                       may write leaves the old text (or none) and the record counted.
 *
 * No Slurm here: the probe (spank/plugin/tests/promfile_probe.c) runs it as tests and
 * bench/bench_metrics.py do.
 */
#ifndef SQUALL_PLUGIN_PROMFILE_H
#define SQUALL_PLUGIN_PROMFILE_H

#include <stddef.h>

#include "metrics.h"

#ifndef SQ_METRICS_STATE
#define SQ_METRICS_STATE "/var/lib/squall/metrics"
#endif
/* How long a step's end waits for the record's lock before it gives this step's counts
 * up (logged): another step holds it for a read, a write and a rename. */
#define SQ_METRICS_LOCK_MS 2000

/* Add st to the record in state_dir (made when missing, its parent must exist) and
 * render it into textfile_dir/squall.prom (textfile_dir NULL: the record only). 0 ok;
 * -1 with err (one line): nothing counted when the record could not be updated; 1 with
 * err when the record was updated but the text could not be written. */
int sq_metrics_update(const char *state_dir, const char *textfile_dir,
		      const struct sq_metrics_step *st, char *err, size_t errlen);

/* Local task 0's join time, from the task (task_init, as the user) to slurmstepd (exit):
 * a pipe made in user_init, both ends close-on-exec, the read end non-blocking. */
int sq_metrics_join_open(int fds[2]);
/* In the task: ok 1 joined, 0 failed; seconds it took. */
void sq_metrics_join_say(int fd, int ok, double seconds);
/* In slurmstepd: 1 and *ok, *seconds when the task said it, else 0. */
int sq_metrics_join_read(int fd, int *ok, double *seconds);

#endif
