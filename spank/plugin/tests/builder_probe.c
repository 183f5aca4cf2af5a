/*
 * builder_probe.c: the image builder (spank/plugin/builder.c) and the registry build
 * (image.c) outside Slurm, for tests/unit/test_plugin_builder.py. Prints key=value lines.
 *   builder_probe name CONF             rc= name= note=
 *   builder_probe lookup NAME           rc= uid= gid= groups= env=... note=
 *   builder_probe resolve CONF SQSHBUILD CACHE REF UID GID DROP [VAR=VALUE...]
 *       sq_image_resolve as the plugin calls it, the job's environment the VAR=VALUEs;
 *       DROP=1: first drop the effective ids to UID:GID as slurmstepd's user_init does.
 *       PROBE_PROGRESS=S in the probe's environment: progress lines every S seconds, each
 *       printed as said=LINE at once, with ms= the milliseconds since the resolve began.
 *       rc= path= err= note=... said=... ms=...
 */
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "builder.h"
#include "image.h"

static void print_lines(const char *key, const char *text)
{
	const char *p = text;

	while (*p) {
		size_t n = strcspn(p, "\n");
		printf("%s=%.*s\n", key, (int)n, p);
		p += n + (p[n] == '\n');
	}
}

static int cmd_name(const char *conf)
{
	char name[64], note[1024];
	int rc = sq_builder_name(conf, name, sizeof(name), note, sizeof(note));

	printf("rc=%d\nname=%s\n", rc, name);
	print_lines("note", note);
	return 0;
}

static int cmd_lookup(const char *name)
{
	struct sq_builder b;
	char note[1024];
	int rc = sq_builder_lookup(name, &b, note, sizeof(note));

	printf("rc=%d\n", rc);
	print_lines("note", note);
	if (rc != 1)
		return 0;
	printf("uid=%u\ngid=%u\ngroups=", (unsigned)b.cred.uid, (unsigned)b.cred.gid);
	for (int i = 0; i < b.cred.ngroups; i++)
		printf("%s%u", i ? "," : "", (unsigned)b.cred.groups[i]);
	printf("\n");
	for (char **e = b.envp; *e; e++)
		printf("env=%s\n", *e);
	sq_builder_free(&b);
	return 0;
}

static struct timespec began;

static void say(const char *line)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	printf("said=%s\nms=%ld\n", line, (long)((now.tv_sec - began.tv_sec) * 1000 +
					       (now.tv_nsec - began.tv_nsec) / 1000000));
}

static int cmd_resolve(char **argv, int argc)
{
	struct sq_cred cred = { (uid_t)atol(argv[4]), (gid_t)atol(argv[5]), NULL, 0 };
	struct sq_image_env e = { "/", argv[1], argv[2], argv + 7, &cred, argv[0], NULL, 0,
				  NULL, NULL, 1, 0 };
	struct sq_image img;
	char err[4096] = "";
	int rc;

	(void)argc;
	if (atoi(argv[6]) == 1 && (setgroups(1, &cred.gid) < 0 || setegid(cred.gid) < 0 ||
				   seteuid(cred.uid) < 0)) {
		perror("drop");
		return 1;
	}
	if (getenv("PROBE_PROGRESS") != NULL) {
		e.progress_s = atoi(getenv("PROBE_PROGRESS"));
		e.say = say;
	}
	clock_gettime(CLOCK_MONOTONIC, &began);
	rc = sq_image_resolve(argv[3], &e, &img, err, sizeof(err));
	printf("rc=%d\n", rc);
	if (rc < 0)
		printf("err=%s\n", err);
	else
		printf("path=%s\n", img.path);
	print_lines("note", img.note);
	sq_image_free(&img);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && strcmp(argv[1], "name") == 0)
		return cmd_name(argv[2]);
	if (argc == 3 && strcmp(argv[1], "lookup") == 0)
		return cmd_lookup(argv[2]);
	if (argc >= 9 && strcmp(argv[1], "resolve") == 0)
		return cmd_resolve(argv + 2, argc - 2);
	fprintf(stderr, "usage: see builder_probe.c\n");
	return 2;
}
