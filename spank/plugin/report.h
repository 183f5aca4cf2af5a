/*
 * report.h: the step's failure and warnings, messages for the user's terminal, and
 * per-phase timings.
 *
 * slurmstepd's own log does not reach srun while the step is being set up, so an error
 * found in user_init is kept here and printed by the task (whose stderr is srun's) in
 * task_init, which then fails the task. Everything is one line starting "squall: ". The
 * kept error is the step's failure: one slurmstepd runs one step, and this is the one
 * place that says whether it failed and why.
 */
#ifndef SQUALL_PLUGIN_REPORT_H
#define SQUALL_PLUGIN_REPORT_H

#include <stddef.h>

#include "strbuf.h"  /* SQ_ERR_LEN */

/* The step failed: keep the first error (later ones are logged only). */
void sq_report_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* sq_report_error("%s", msg); returns -1. */
int sq_report_fail(const char *msg);
/* 1 once the step failed. */
int sq_report_failed(void);
/* The kept error, or NULL. */
const char *sq_report_pending(void);
/* Print the kept error on stderr (the task's, i.e. srun's) and in the Slurm log. */
void sq_report_flush(void);

/* One more warning line for local task 0 to print (NULL or "" adds nothing). */
void sq_report_warn(const char *line);
/* Print the kept warnings on stderr, once. */
void sq_report_warnings(void);
/* Print one line on stderr now (srun / sbatch context, or a task). */
void sq_report_now(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Timings: sq_phase_begin() then sq_phase_end("start container"); the lines are kept
 * and printed by the first task with --container-log=verbose. */
void sq_phase_begin(void);
void sq_phase_end(const char *phase);
const char *sq_phase_text(void);
/* The phases ended so far, in order (at most max): their names (the literals given to
 * sq_phase_end) and milliseconds, for the node's metrics (promfile.h). Returns how many. */
size_t sq_phase_list(const char **names, double *ms, size_t max);
double sq_now(void);

#endif
