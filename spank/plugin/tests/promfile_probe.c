/*
 * promfile_probe.c: the node's metrics files (spank/plugin/promfile.c) outside Slurm, for
 * tests/unit/test_plugin_promfile.py and bench/bench_metrics.py.
 *   promfile_probe update STATE TEXTDIR N [FAIL]
 *       N updates, each one step started from the image (start 0.5 s, join 0.01 s; FAIL=1:
 *       a step that failed to resolve its image); TEXTDIR "-": the record only.
 *       Prints rc= (the last update's) err= and us= (microseconds per update).
 *   promfile_probe join
 *       the join pipe: a child says 1 and 0.25 s, the parent reads it: ok= seconds=
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "promfile.h"
#include "strbuf.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int update(int argc, char **argv)
{
	struct sq_metrics_step st;
	char err[SQ_ERR_LEN] = "";
	const char *textdir = strcmp(argv[3], "-") == 0 ? NULL : argv[3];
	long n = strtol(argv[4], NULL, 10);
	int fail = argc > 5 && strcmp(argv[5], "1") == 0, rc = 0;
	double t0;

	sq_metrics_step_init(&st);
	if (fail) {
		st.reason = SQ_MREASON_RESOLVE;
	} else {
		st.source = SQ_MSRC_IMAGE;
		st.image_bytes = 1 << 20;
		st.phase_s[SQ_MPH_START] = 0.5;
		st.phase_s[SQ_MPH_JOIN] = 0.01;
	}
	t0 = now();
	for (long i = 0; i < n; i++)
		rc = sq_metrics_update(argv[2], textdir, &st, err, sizeof(err));
	printf("rc=%d\nerr=%s\nus=%.1f\n", rc, err, n > 0 ? (now() - t0) * 1e6 / (double)n : 0);
	return 0;
}

static int join(void)
{
	int fds[2], ok = -1, status, got;
	double s = -1;
	pid_t pid;

	if (sq_metrics_join_open(fds) < 0)
		return 1;
	printf("empty=%d\n", sq_metrics_join_read(fds[0], &ok, &s));
	pid = fork();
	if (pid == 0) {
		sq_metrics_join_say(fds[1], 1, 0.25);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	got = sq_metrics_join_read(fds[0], &ok, &s);
	printf("got=%d\nok=%d\nseconds=%g\n", got, ok, s);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && strcmp(argv[1], "update") == 0)
		return update(argc, argv);
	if (argc == 2 && strcmp(argv[1], "join") == 0)
		return join();
	fprintf(stderr, "usage: promfile_probe update STATE TEXTDIR N [FAIL] | join\n");
	return 2;
}
