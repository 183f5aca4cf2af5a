/*
 * save_probe.c: --container-save's output path (spank/plugin/save.c) outside Slurm, for
 * tests/unit/test_plugin_save_path.py. Run as root; prints rc= and err=.
 *   save_probe check PATH UID GID        sq_save_check with the effective ids dropped to
 *                                        UID:GID, as in slurmstepd's user_init
 *   save_probe export ENROOT NAME PATH UID GID JOBID STEPID
 *                                        sq_save_export as the step's end runs it (root)
 */
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "save.h"

static int cmd_check(char **argv)
{
	gid_t gid = (gid_t)atol(argv[2]);
	char err[4096] = "";
	int rc;

	if (setgroups(1, &gid) < 0 || setegid(gid) < 0 || seteuid((uid_t)atol(argv[1])) < 0) {
		perror("drop");
		return 1;
	}
	rc = sq_save_check(argv[0], err, sizeof(err));
	printf("rc=%d\n", rc);
	if (rc < 0)
		printf("err=%s\n", err);
	return 0;
}

static int cmd_export(char **argv)
{
	char *envp[] = { (char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	struct sq_cred cred;
	struct sq_runtime rt = { argv[0], envp, &cred };
	char err[4096] = "";
	int rc;

	if (sq_cred_init(&cred, (uid_t)atol(argv[3]), (gid_t)atol(argv[4]), err,
			 sizeof(err)) < 0) {
		printf("rc=-2\nerr=%s\n", err);
		return 0;
	}
	rc = sq_save_export(&rt, argv[1], argv[2], (uint32_t)atol(argv[5]),
			    (uint32_t)atol(argv[6]), err, sizeof(err));
	printf("rc=%d\n", rc);
	if (rc < 0)
		printf("err=%s\n", err);
	sq_cred_free(&cred);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && strcmp(argv[1], "check") == 0)
		return cmd_check(argv + 2);
	if (argc == 9 && strcmp(argv[1], "export") == 0)
		return cmd_export(argv + 2);
	fprintf(stderr, "usage: see save_probe.c\n");
	return 2;
}
