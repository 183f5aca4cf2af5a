/* report.c: see report.h. */
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "report.h"

static char pending[SQ_ERR_LEN];
static char warnings[2048];
static char phases[1024];
static double phase_t0;
static const char *phase_names[16];
static double phase_ms[16];
static size_t phase_n;

void sq_report_error(const char *fmt, ...)
{
	char line[SQ_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* Logged at info level: slurmstepd's errors may also reach srun, and the task
	 * prints this line there once. */
	slurm_info("squall: error: %s", line);
	if (pending[0] == '\0')  /* never empty: an empty text would not fail the step */
		snprintf(pending, sizeof(pending), "%s", line[0] ? line : "failed (no message)");
}

int sq_report_fail(const char *msg)
{
	sq_report_error("%s", msg);
	return -1;
}

int sq_report_failed(void)
{
	return pending[0] != '\0';
}

void sq_report_warn(const char *line)
{
	size_t n = strlen(warnings);

	if (line == NULL || *line == '\0')
		return;
	snprintf(warnings + n, sizeof(warnings) - n, "%s%s", n ? "\n" : "", line);
}

const char *sq_report_pending(void)
{
	return pending[0] ? pending : NULL;
}

/* write(2) straight to fd 2: the task's stderr is srun's, and stdio buffers may be
 * in any state inside slurmstepd's forked child. */
static void write_line(const char *prefix, const char *text)
{
	char line[SQ_ERR_LEN + 64];
	int n = snprintf(line, sizeof(line), "%s%s\n", prefix, text);

	if (n > 0) {
		size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
		if (write(STDERR_FILENO, line, len) < 0) {
			/* nothing better to do: the message is in the Slurm log too */
		}
	}
}

void sq_report_flush(void)
{
	if (pending[0])
		write_line("squall: error: ", pending);
}

void sq_report_warnings(void)
{
	size_t n = strlen(warnings);

	while (n > 0 && warnings[n - 1] == '\n')
		warnings[--n] = '\0';
	if (n > 0)
		write_line("", warnings);
	warnings[0] = '\0';
}

void sq_report_now(const char *prefix, const char *fmt, ...)
{
	char text[SQ_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	write_line(prefix, text);
}

double sq_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sq_phase_begin(void)
{
	phase_t0 = sq_now();
}

void sq_phase_end(const char *phase)
{
	size_t used = strlen(phases);
	double ms = (sq_now() - phase_t0) * 1000.0;

	snprintf(phases + used, sizeof(phases) - used, "%s%s %.1f ms",
		 used ? ", " : "", phase, ms);
	if (phase_n < sizeof(phase_ms) / sizeof(phase_ms[0])) {
		phase_names[phase_n] = phase;
		phase_ms[phase_n++] = ms;
	}
	phase_t0 = sq_now();
}

const char *sq_phase_text(void)
{
	return phases;
}

size_t sq_phase_list(const char **names, double *ms, size_t max)
{
	size_t n = phase_n < max ? phase_n : max;

	for (size_t i = 0; i < n; i++) {
		names[i] = phase_names[i];
		ms[i] = phase_ms[i];
	}
	return n;
}
