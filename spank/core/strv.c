/* strv.c: see strv.h. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "strv.h"

int sq_strv_pushn(char ***arr, size_t *n, const char *s, size_t len)
{
	char *copy = strndup(s, len), **grown;

	if (copy == NULL)
		return -1;
	grown = realloc(*arr, (*n + 2) * sizeof(char *));
	if (grown == NULL) {
		free(copy);
		return -1;
	}
	*arr = grown;
	grown[(*n)++] = copy;
	grown[*n] = NULL;
	return 0;
}

int sq_strv_push(char ***arr, size_t *n, const char *s)
{
	return sq_strv_pushn(arr, n, s, strlen(s));
}

int sq_strv_push_lines(char ***arr, size_t *n, const char *text)
{
	const char *p = text;

	while (p != NULL && *p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len > 0 && sq_strv_pushn(arr, n, p, len) < 0)
			return -1;
		p = nl ? nl + 1 : NULL;
	}
	if (*arr == NULL) {
		*arr = calloc(1, sizeof(char *));
		return *arr ? 0 : -1;
	}
	return 0;
}

void sq_strv_free(char **arr)
{
	for (size_t i = 0; arr != NULL && arr[i] != NULL; i++)
		free(arr[i]);
	free(arr);
}
