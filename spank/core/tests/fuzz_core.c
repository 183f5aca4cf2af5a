/*
 * fuzz_core.c: run every core parser over a corpus of hostile inputs, and over
 * deterministic mutations of each, so that AddressSanitizer and UBSan see every path.
 *
 * Built by tests/unit/test_core_asan.py with -fsanitize=address,undefined and run as
 *   fuzz_core CORPUS [MUTATIONS]
 * CORPUS holds the inputs separated by NUL bytes. Exit 0 when every call returned and
 * every error message was one NUL-terminated line; the sanitizers abort on any memory
 * error, leak or undefined behaviour.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "config.h"
#include "env.h"
#include "imageref.h"
#include "mounts.h"
#include "options.h"
#include "procstat.h"
#include "unshare.h"
#include "quote.h"
#include "strbuf.h"

static unsigned long calls, failures;

/* An error message must be one line that fits its buffer. */
static void check_err(const char *who, int rc, const char *err, size_t errlen)
{
	calls++;
	if (rc == 0 || errlen == 0)
		return;
	if (memchr(err, '\0', errlen) == NULL || strchr(err, '\n') != NULL ||
	    (errlen > 16 && err[0] == '\0')) {
		fprintf(stderr, "%s: bad error message '%.*s'\n", who, (int)errlen, err);
		failures++;
	}
}

static void run_one(const char *in)
{
	static const size_t errlens[] = { 512, 24, 1 };
	static const char *const keys[] = {
		"runtime_path", "enroot", "sqshbuild", "image_cache", "container_scope",
		"execute_entrypoint", "efa", "efa_sysfs_root", "efa_dev_root", "efa_opt_root",
		"sbatch_support", "log", "use_squashfuse", "use_enroot_load", "importer",
		"container_name_strict", "bogus", NULL
	};
	char err[512], show[SQ_SHOW_MAX], var[96], line[8192];
	size_t k, e, len = strlen(in);

	for (e = 0; e < sizeof(errlens) / sizeof(errlens[0]); e++) {
		size_t el = errlens[e];
		struct sq_image_ref ref;
		struct sq_mount_list ml;
		char *s = NULL, *name = NULL;
		int mode, rc, id;

		rc = sq_imgref_parse(in, &ref, err, el);
		check_err("imageref", rc, err, el);
		sq_imgref_free(&ref);
		rc = sq_imgref_parse_as(in, SQ_IMGREF_ARCHIVES, &ref, err, el);
		check_err("imageref archives", rc, err, el);
		sq_imgref_free(&ref);

		rc = sq_mounts_parse(in, NULL, &ml, err, el);
		check_err("mounts", rc, err, el);
		sq_mounts_free(&ml);
		rc = sq_mounts_parse(in, "/home/user/run dir", &ml, err, el);
		check_err("mounts+cwd", rc, err, el);
		sq_mounts_free(&ml);
		rc = sq_mounts_parse("./x:/y", in, &ml, err, el);
		check_err("mounts cwd", rc, err, el);
		sq_mounts_free(&ml);

		for (id = 0; id < SQ_OPT_COUNT; id++) {
			const struct sq_flag *f = sq_opt_flag((size_t)id);

			rc = sq_opt_check_value(f->name, in, err, el);
			check_err(f->name, rc, err, el);
		}
		rc = sq_opt_check_value(in, NULL, err, el);
		check_err("flag name", rc, err, el);
		rc = sq_opt_parse_name(in, &name, &mode, err, el);
		check_err("name", rc, err, el);
		free(name);
		{
			/* An exact-size copy, so that a read past len is caught. */
			char *exact = malloc(len ? len : 1), state;
			unsigned long long start;
			long pid;

			if (exact == NULL)
				abort();
			memcpy(exact, in, len);
			(void)sq_procstat_parse(exact, len, &state, &start);
			(void)sq_running_parse(exact, len, &pid, &start);
			{
				unsigned long long nsstart;
				long nspid;
				(void)sq_running_parse_ns(exact, len, &pid, &start, &nspid, &nsstart);
			}
			free(exact);
		}

		rc = sq_shell_quote(in, len, &s, err, el);
		check_err("quote", rc, err, el);
		free(s);
		rc = sq_text_check("--x", in, 100, err, el);
		check_err("text", rc, err, el);
		rc = sq_env_check_names(in, err, el);
		check_err("env names", rc, err, el);
		{
			char canon[32];
			int mask;

			rc = sq_unshare_parse(in, &mask, err, el);
			check_err("unshare", rc, err, el);
			(void)sq_unshare_str(rc == 0 ? mask : 7, canon, sizeof(canon));
		}

		for (k = 0; keys[k] != NULL; k++) {
			struct sq_config c;
			char *argv[3];

			snprintf(line, sizeof(line), "%s=%s", keys[k], in);
			argv[0] = line;
			argv[1] = (char *)in;
			argv[2] = NULL;
			rc = sq_config_parse(&c, 1, argv, err, el);
			check_err("config", rc, err, el);
			if (rc == 0)
				sq_config_free(&c);
			rc = sq_config_parse(&c, 2, argv, err, el);
			check_err("config2", rc, err, el);
			if (rc == 0)
				sq_config_free(&c);
		}
	}

	/* Every SQUALL_/PYXIS_ variable set to the input at once. */
	{
		char *envp[2 * SQ_OPT_COUNT + 2];
		char store[2 * SQ_OPT_COUNT][256];
		struct sq_opts o;
		size_t n = 0;
		int id, rc;

		for (id = 0; id < SQ_OPT_COUNT; id++) {
			sq_opt_env_name(id, "SQUALL_", var, sizeof(var));
			snprintf(store[n], sizeof(store[n]), "%s=%.100s", var, in);
			envp[n] = store[n];
			n++;
			sq_opt_env_name(id, "PYXIS_", var, sizeof(var));
			snprintf(store[n], sizeof(store[n]), "%s=%.100s", var, in);
			envp[n] = store[n];
			n++;
		}
		envp[n++] = (char *)in;
		envp[n] = NULL;
		sq_opts_init(&o);
		rc = sq_opts_load_environ(&o, envp, err, sizeof(err));
		check_err("load_environ", rc, err, sizeof(err));
		rc = sq_opts_check(&o, show, sizeof(show), err, sizeof(err));
		check_err("opts_check", rc < 0 ? -1 : 0, err, sizeof(err));
		sq_opt_set(&o, SQ_OPT_IMAGE, in, SQ_SRC_CLI, err, sizeof(err));
		sq_opt_set(&o, SQ_OPT_IMAGE, "ubuntu", SQ_SRC_CLI, err, sizeof(err));
		sq_opt_set(&o, SQ_OPT_MOUNT_HOME, in, SQ_SRC_CLI, err, sizeof(err));
		sq_opt_set(&o, SQ_OPT_NO_MOUNT_HOME, NULL, SQ_SRC_CLI, err, sizeof(err));
		sq_opts_free(&o);

		/* The environment rules on the same inputs. */
		{
			char **out = NULL;

			rc = sq_env_clean(envp, &out, err, sizeof(err));
			check_err("env_clean", rc, err, sizeof(err));
			sq_env_free(out);
			rc = sq_env_merge(envp, in, len, in, &out, err, sizeof(err));
			check_err("env_merge", rc, err, sizeof(err));
			sq_env_free(out);
			rc = sq_env_overlay(in, len, "A,B", envp, &out, err, sizeof(err));
			check_err("env_overlay", rc, err, sizeof(err));
			sq_env_free(out);
		}
	}

	/* The conf file with the input in every slot. */
	{
		const char *list[] = { in, "A=1", NULL };
		const char *argv[] = { "/usr/bin/hook", in, NULL };
		struct sq_conf_spec spec = { list, list, argv, 1 };
		char *out = NULL;
		int rc;

		rc = sq_conf_render(&spec, &out, err, sizeof(err));
		check_err("conf", rc, err, sizeof(err));
		free(out);
		spec.hook_argv = list;
		rc = sq_conf_render(&spec, &out, err, 1);
		check_err("conf small", rc, err, 1);
		free(out);
	}
	sq_show(in, show, sizeof(show));
	sq_show(in, show, 5);
}

/* Deterministic mutations: flip bytes, insert separators, cut. */
static void mutate_and_run(const char *in, unsigned long seed, int count)
{
	static const char seps[] = ":,+@#/.=$'\"\\ \n\t\x01\xff\xc3";
	size_t len = strlen(in), n, pos, i;
	char *buf = malloc(len + 64);
	int m, j;

	if (buf == NULL)
		return;
	for (m = 0; m < count; m++) {
		memcpy(buf, in, len + 1);
		n = len;
		for (j = 0; j < 1 + m % 4; j++) {
			seed = seed * 6364136223846793005UL + 1442695040888963407UL;
			pos = n ? (size_t)(seed >> 33) % (n + 1) : 0;
			switch ((seed >> 20) % 4) {
			case 0:    /* insert a separator */
				if (n + 2 >= len + 64)
					break;
				memmove(buf + pos + 1, buf + pos, n - pos + 1);
				buf[pos] = seps[(seed >> 40) % (sizeof(seps) - 1)];
				n++;
				break;
			case 1:    /* replace a byte (never with NUL) */
				if (pos < n)
					buf[pos] = (char)(1 + (seed >> 45) % 255);
				break;
			case 2:    /* cut */
				buf[pos] = '\0';
				n = pos;
				break;
			default:   /* duplicate the head */
				for (i = 0; i < pos && n + 1 < len + 63; i++)
					buf[n++] = buf[i];
				buf[n] = '\0';
				break;
			}
		}
		run_one(buf);
	}
	free(buf);
}

int main(int argc, char **argv)
{
	FILE *f;
	char *data;
	long size;
	size_t off;
	int mutations = argc > 2 ? atoi(argv[2]) : 20;
	unsigned long entries = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: fuzz_core CORPUS [MUTATIONS]\n");
		return 2;
	}
	f = fopen(argv[1], "rb");
	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		perror(argv[1]);
		return 2;
	}
	data = malloc((size_t)size + 1);
	if (data == NULL || fread(data, 1, (size_t)size, f) != (size_t)size) {
		perror(argv[1]);
		return 2;
	}
	fclose(f);
	data[size] = '\0';
	for (off = 0; off <= (size_t)size; off += strlen(data + off) + 1) {
		if (off == (size_t)size)
			break;
		run_one(data + off);
		mutate_and_run(data + off, 0x9e3779b97f4a7c15UL ^ off, mutations);
		entries++;
	}
	/* The whole corpus as one environ block. */
	{
		char **out = NULL;
		char err[256];

		sq_env_merge(NULL, data, (size_t)size, NULL, &out, err, sizeof(err));
		sq_env_free(out);
	}
	free(data);
	printf("fuzz_core: %lu entries, %lu calls, %lu bad messages\n", entries, calls, failures);
	return failures ? 1 : 0;
}
