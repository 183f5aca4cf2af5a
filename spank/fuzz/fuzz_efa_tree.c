/* fuzz_efa_tree: EFA detection and the image scan over directory trees built from the
 * input in a private temporary directory: a sysfs tree (product_name, an infiniband
 * device with a driver link), a dev tree, the host's /opt/amazon libraries, and an image
 * root whose library directories may be symlinks pointing anywhere (../.., absolute):
 * the scan must stay inside the image. Fields: product_name, device name, driver link
 * target, libfabric file name, ofi-nccl file name, ofi-nccl content, image symlink target,
 * environment file content, variable name. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "efa.h"
#include "efa_internal.h"
#include "fuzz.h"

static char base[64];
/* the tree's roots, and the skeleton's directories the inputs write into */
static char sys[160], dev[160], opt[160], img[160];
static char dmi[200], ib_class[200], host_efa[200], host_ofi[200];
static char img_lib[200], img_ofi[200], img_etc[200];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) == 0 ? 0 : 0;
}

static void rm_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void mkdirs(const char *path)
{
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(buf, 0755);
			*p = '/';
		}
	mkdir(buf, 0755);
}

/* A file name from fuzz bytes: no '/', not empty, not . or .., at most 100 bytes. */
static void clean_name(char **s, const char *dflt)
{
	if (strlen(*s) > 100)
		(*s)[100] = '\0';
	for (char *p = *s; *p; p++)
		if (*p == '/')
			*p = '_';
	if (!**s || !strcmp(*s, ".") || !strcmp(*s, "..")) {
		free(*s);
		*s = strdup(dflt);
		if (*s == NULL)
			abort();
	}
}

static void write_file(const char *dir, const char *name, const char *content, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	if (f == NULL)
		return;
	fwrite(content, 1, len, f);
	fclose(f);
}

/* remove dir/name, a file, symlink or (empty) directory */
static void unlink_in(const char *dir, const char *name)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	(void)remove(path);
}

static void rm_base(void)
{
	rm_tree(base);
}

/* The directories every input has, made once (about 5x the executions per second of
 * building the whole tree per input): each input adds only the entries its fields name
 * and removes them afterwards. */
static void make_skeleton(void)
{
	static char uverbs[200];
	/* each path is a parent (set by an earlier row) and a relative name; mk: made here */
	const struct {
		char *out;
		size_t size;
		const char *parent, *rel;
		int mk;
	} rows[] = {
		{ sys, sizeof(sys), base, "t/sys", 0 },
		{ dev, sizeof(dev), base, "t/dev", 0 },
		{ opt, sizeof(opt), base, "t/opt", 0 },
		{ img, sizeof(img), base, "t/img", 0 },
		{ dmi, sizeof(dmi), sys, "devices/virtual/dmi/id", 1 },
		{ ib_class, sizeof(ib_class), sys, "class/infiniband", 1 },
		{ uverbs, sizeof(uverbs), dev, "infiniband", 1 },
		{ host_efa, sizeof(host_efa), opt, "efa/lib", 1 },
		{ host_ofi, sizeof(host_ofi), opt, "ofi-nccl/lib", 1 },
		{ img_lib, sizeof(img_lib), img, "usr/lib", 1 },
		{ img_ofi, sizeof(img_ofi), img, "opt/aws-ofi-nccl/lib", 1 },
		{ img_etc, sizeof(img_etc), img, "etc", 1 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		snprintf(rows[i].out, rows[i].size, "%s/%s", rows[i].parent, rows[i].rel);
		if (rows[i].mk)
			mkdirs(rows[i].out);
	}
	write_file(uverbs, "uverbs0", "", 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	struct stat st;

	/* The tree in memory (tmpfs) when the machine has one, several times faster. */
	snprintf(base, sizeof(base), "%s/squall-fuzz-efa-XXXXXX",
		 stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp");
	if (mkdtemp(base) == NULL)
		abort();
	atexit(rm_base);
	make_skeleton();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_fields ff;
	struct sq_efa_roots roots;
	struct sq_efa_node node;
	struct sq_efa_image image;
	char p[4096], ib[4096], err[512], out[256];
	int fd;

	fz_split(data, size, 9, &ff);
	if (ff.len[5] > 4096 || ff.len[7] > 4096)
		goto done;
	clean_name(&ff.f[1], "efa0");
	clean_name(&ff.f[3], "libfabric.so.1");
	clean_name(&ff.f[4], "libnccl-net-ofi.so");

	write_file(dmi, "product_name", ff.f[0], ff.len[0]);
	snprintf(ib, sizeof(ib), "%s/%s", ib_class, ff.f[1]);
	mkdir(ib, 0755);
	snprintf(p, sizeof(p), "%s/device", ib);
	mkdir(p, 0755);
	if (ff.len[2] && ff.len[2] < 1024) {
		snprintf(p, sizeof(p), "%s/device/driver", ib);
		(void)symlink(ff.f[2], p);
	}
	write_file(host_efa, ff.f[3], "", 0);
	write_file(host_ofi, ff.f[4], ff.f[5], ff.len[5]);

	/* the image: libraries in usr/lib, usr/lib64 a symlink to the fuzzed target */
	write_file(img_lib, ff.f[3], "", 0);
	write_file(img_ofi, ff.f[4], ff.f[5], ff.len[5]);
	write_file(img_etc, "environment", ff.f[7], ff.len[7]);
	if (ff.len[6] && ff.len[6] < 1024) {
		snprintf(p, sizeof(p), "%s/usr/lib64", img);
		(void)symlink(ff.f[6], p);
		snprintf(p, sizeof(p), "%s/opt/amazon", img);
		(void)symlink(ff.f[6], p);
	}

	roots.sysfs = sys;
	roots.dev = dev;
	roots.opt = opt;
	if (sq_efa_detect(&roots, &node, err, sizeof(err)) == 0) {
		struct sq_efa_request req = { 0, NULL, NULL, NULL };
		struct sq_efa_plan plan;

		if (sq_efa_image_scan(img, &image, err, sizeof(err)) == 0 &&
		    sq_efa_plan(&node, &image, &req, &plan, err, sizeof(err)) == 0)
			sq_efa_plan_free(&plan);
		/* a library found in the image is named by its path inside the image */
		if (image.libfabric.dir[0] && strncmp(image.libfabric.dir, base, strlen(base)) == 0)
			abort();
	}
	fd = open(img, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		(void)sq_efa_env_file_get(fd, "/etc/environment", ff.f[8], out, sizeof(out));
		(void)sq_efa_env_file_get(fd, "etc/environment", ff.f[8], out, 4);
		close(fd);
	}

	/* back to the skeleton: remove what this input added */
	unlink_in(ib, "device/driver");
	unlink_in(ib, "device");
	unlink_in(ib_class, ff.f[1]);
	unlink_in(host_efa, ff.f[3]);
	unlink_in(host_ofi, ff.f[4]);
	unlink_in(img_lib, ff.f[3]);
	unlink_in(img_ofi, ff.f[4]);
	unlink_in(img, "usr/lib64");
	unlink_in(img, "opt/amazon");
done:
	fz_free(&ff);
	return 0;
}
