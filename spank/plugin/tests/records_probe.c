/*
 * records_probe.c: the job epilog's sweep of a user's runtime directory, as
 * slurm_spank_job_epilog does it (spank/plugin/records.c, running.c), outside Slurm, for
 * tests/unit/test_plugin_epilog_records.py.
 *   records_probe DIR JOBID UID SCOPE_JOB       prints ended= and removed= (or err=)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "records.h"
#include "running.h"
#include "safeopen.h"

int main(int argc, char **argv)
{
	char err[1024];
	uint32_t jobid;
	long uid;
	int dfd;

	if (argc != 5) {
		fprintf(stderr, "usage: records_probe DIR JOBID UID SCOPE_JOB\n");
		return 2;
	}
	jobid = (uint32_t)strtoul(argv[2], NULL, 10);
	uid = strtol(argv[3], NULL, 10);
	dfd = sq_dir_open_checked(AT_FDCWD, argv[1], uid, err, sizeof(err));
	if (dfd < 0) {
		printf("err=%s\n", err);
		return 0;
	}
	printf("ended=%d\n", sq_records_sweep_job(dfd, jobid, (uid_t)uid));
	printf("removed=%d\n", sq_running_sweep_job(dfd, jobid, atoi(argv[4])));
	close(dfd);
	return 0;
}
