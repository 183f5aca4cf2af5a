/*
 * image_probe.c: sq_image_check_file (spank/plugin/image.c) outside Slurm, for
 * tests/unit/test_plugin_image_input.py. Usage: image_probe WHAT PATH; prints rc= and
 * err= (or identity=), one per line.
 */
#include <stdio.h>

#include "image.h"

int main(int argc, char **argv)
{
	char identity[17] = "", err[2048] = "";
	int rc;

	if (argc != 3) {
		fprintf(stderr, "usage: image_probe WHAT PATH\n");
		return 2;
	}
	rc = sq_image_check_file(argv[1], argv[2], identity, err, sizeof(err));
	printf("rc=%d\n", rc);
	if (rc < 0)
		printf("err=%s\n", err);
	else
		printf("identity=%s\n", identity);
	return 0;
}
