/*
 * cache_probe.c: the node-local cache of extracted images (spank/keeper/extracted.c)
 * outside Slurm, for tests/unit/test_plugin_extracted_leftovers.py.
 *   cache_probe evict DIR MAX_BYTES
 *   cache_probe build DIR KEY IMAGE UNSQUASHFS MAX_BYTES [COPY]   prints rc=
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extracted.h"

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "evict") == 0) {
		sq_extracted_evict(argv[2], strtoull(argv[3], NULL, 10));
		printf("evicted\n");
		return 0;
	}
	if ((argc == 7 || argc == 8) && strcmp(argv[1], "build") == 0) {
		printf("rc=%d\n", sq_extracted_build(argv[2], argv[3], argv[4],
						     argc == 8 ? argv[7] : NULL, argv[5],
						     strtoull(argv[6], NULL, 10)));
		return 0;
	}
	fprintf(stderr, "usage: cache_probe evict DIR MAX | build DIR KEY IMAGE TOOL MAX [COPY]\n");
	return 2;
}
