/* seccomp_probe.c: drive spank/plugin/seccomp.c outside Slurm (tests/unit/test_plugin_seccomp.py).
 * As an unprivileged user (root drops to nobody first): install the filter, then report
 * what chown, setuid, setgroups and setfsuid return, one "name=rc" per line. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include "seccomp.h"

int main(int argc, char **argv)
{
	char err[256], line[256];
	gid_t none[1] = { 0 };
	FILE *f;

	if (argc != 3)
		return 2;
	if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0))
		return 3;
	if (strcmp(argv[1], "filter") == 0 && sq_seccomp_install(err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 4;
	}
	printf("chown=%d\n", chown(argv[2], 0, 0));
	printf("lchown=%d\n", lchown(argv[2], 0, 0));
	printf("setuid=%d\n", setuid(0));
	printf("setresgid=%d\n", setresgid(0, 0, 0));
	printf("setgroups=%d\n", setgroups(1, none));
	printf("uid=%d\n", (int)getuid());
	printf("fsuid_query=%d\n", setfsuid((uid_t)-1));
	f = fopen("/proc/self/status", "r");
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "Seccomp:", 8) == 0)
			printf("seccomp=%s", line + 9 + strspn(line + 9, " \t"));
	if (f != NULL)
		fclose(f);
	return 0;
}
