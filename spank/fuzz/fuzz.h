/*
 * fuzz.h: helpers shared by the libFuzzer targets in spank/fuzz/ (one target per file).
 *
 * An input is split at NUL bytes into fields (a target takes field i as its i-th
 * argument); every field is a fresh heap copy of exactly its bytes plus the NUL, so that
 * AddressSanitizer sees a read past the end. Error messages are checked to be one line.
 */
#ifndef SQUALL_FUZZ_H
#define SQUALL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FZ_MAX_FIELDS 16

struct fz_fields {
	char *f[FZ_MAX_FIELDS + 1]; /* NULL-terminated; missing fields are "" */
	size_t len[FZ_MAX_FIELDS];
	int n;                      /* fields present in the input */
};

static inline char *fz_dup(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);

	if (s == NULL)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

/* Split data at NUL into at most `max` fields; fields beyond the input are "". */
static inline void fz_split(const uint8_t *data, size_t size, int max, struct fz_fields *out)
{
	size_t start = 0;
	int i = 0;

	if (max > FZ_MAX_FIELDS)
		max = FZ_MAX_FIELDS;
	memset(out, 0, sizeof(*out));
	while (i < max) {
		size_t end = start;

		while (end < size && (data[end] != '\0' || i == max - 1))
			end++;
		if (start > size)
			break;
		out->f[i] = fz_dup(data + start, end - start);
		out->len[i] = end - start;
		i++;
		if (end >= size)
			break;
		start = end + 1;
	}
	out->n = i;
	for (; i < max; i++)
		out->f[i] = fz_dup((const uint8_t *)"", 0);
	out->f[max] = NULL;
}

static inline void fz_free(struct fz_fields *ff)
{
	for (int i = 0; i < FZ_MAX_FIELDS && ff->f[i]; i++)
		free(ff->f[i]);
}

/* A failing call's message is one NUL-terminated line within errlen. */
static inline void fz_check_err(int rc, const char *err, size_t errlen)
{
	if (rc == 0 || errlen == 0)
		return;
	if (memchr(err, '\0', errlen) == NULL || strchr(err, '\n') != NULL ||
	    (errlen > 16 && err[0] == '\0'))
		abort();
}

#endif
