/* fuzz_efa_plan: the EFA plan (sq_efa_plan, a pure function) from a node, an image and a
 * request built from the input, including the instance-type profile table and the hook's
 * argv. Bytes 0-7: mode, counts, flags, memlock; then NUL-separated strings: instance
 * type, first device, host libfabric dir/file, host ofi dir/file/suffix/net name, opt
 * root, image libfabric dir/file, image ofi dir/file/suffix/net, nccl_debug, user_set,
 * ld_library_path. */
#include <stdio.h>

#include "efa.h"
#include "efa_internal.h"
#include "fuzz.h"

static void put(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sq_efa_node node;
	struct sq_efa_image image;
	struct sq_efa_request req;
	struct sq_efa_plan plan;
	struct sq_efa_roots roots;
	struct fz_fields ff;
	char err[512], **argv;
	int rc;

	if (size < 8)
		return 0;
	fz_split(data + 8, size - 8, FZ_MAX_FIELDS, &ff);
	memset(&node, 0, sizeof(node));
	memset(&image, 0, sizeof(image));
	put(node.instance_type, sizeof(node.instance_type), ff.f[0]);
	/* sq_efa_detect keeps product_name's first line */
	node.instance_type[strcspn(node.instance_type, "\r\n")] = '\0';
	sq_efa_profile_apply(&node);
	node.n_devices = data[1] % 40 - 4;
	node.n_uverbs = data[2] % 40 - 4;
	put(node.first_device, sizeof(node.first_device), ff.f[1]);
	node.memlock = data[3] == 0xff ? -1 : (long long)data[3] << (data[4] % 40);
	/* host libraries as sq_efa_detect fills them: under the opt root, at the installer's
	 * fixed subdirectories (the plan relies on that); names and contents fuzzed */
	put(node.opt_root, sizeof(node.opt_root), ff.f[8]);
	if (strlen(node.opt_root) > SQ_EFA_PATH_LEN - 64)
		node.opt_root[SQ_EFA_PATH_LEN - 64] = '\0';
	if (data[6] & 2) {
		snprintf(node.libfabric.prefix, sizeof(node.libfabric.prefix), "%s/efa",
			 node.opt_root);
		snprintf(node.libfabric.dir, sizeof(node.libfabric.dir), "%s/efa/%s",
			 node.opt_root, (data[6] & 8) ? "lib64" : "lib");
		put(node.libfabric.file, sizeof(node.libfabric.file), ff.f[3]);
	}
	if (data[6] & 4) {
		const char *sub = (data[6] & 16) ? "aws-ofi-nccl" : "ofi-nccl";

		snprintf(node.ofi_nccl.prefix, sizeof(node.ofi_nccl.prefix), "%s/%s",
			 node.opt_root, sub);
		snprintf(node.ofi_nccl.dir, sizeof(node.ofi_nccl.dir), "%s/%s/lib",
			 node.opt_root, sub);
		put(node.ofi_nccl.file, sizeof(node.ofi_nccl.file), ff.f[5]);
		put(node.ofi_nccl.plugin_suffix, sizeof(node.ofi_nccl.plugin_suffix), ff.f[6]);
		put(node.ofi_nccl.net_name, sizeof(node.ofi_nccl.net_name), ff.f[7]);
	}
	put(image.libfabric.dir, sizeof(image.libfabric.dir), ff.f[9]);
	put(image.libfabric.file, sizeof(image.libfabric.file), ff.f[10]);
	put(image.ofi_nccl.dir, sizeof(image.ofi_nccl.dir), ff.f[11]);
	put(image.ofi_nccl.file, sizeof(image.ofi_nccl.file), ff.f[12]);
	put(image.ofi_nccl.plugin_suffix, sizeof(image.ofi_nccl.plugin_suffix), ff.f[13]);
	put(image.ofi_nccl.net_name, sizeof(image.ofi_nccl.net_name), ff.f[13]);
	req.mode = data[0] % 5 - 1;
	req.nccl_debug = (data[5] & 1) ? ff.f[14] : NULL;
	req.user_set = (data[5] & 2) ? ff.f[15] : NULL;
	req.ld_library_path = (data[5] & 4) ? ff.f[15] : NULL;
	rc = sq_efa_plan(&node, (data[5] & 8) ? &image : NULL, &req, &plan, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	if (rc == 0) {
		if (!plan.env || !plan.fstab || !plan.warnings)
			abort();
		/* every fstab line has four fields */
		for (const char *l = plan.fstab; *l;) {
			const char *nl = strchr(l, '\n');
			int spaces = 0;

			if (nl == NULL)
				abort();
			for (const char *p = l; p < nl; p++) {
				if (*p == '\t' || *p == '\r')
					abort();
				spaces += *p == ' ';
			}
			if (spaces != 3)
				abort();
			l = nl + 1;
		}
		sq_efa_plan_free(&plan);
	}
	for (int i = 0; sq_efa_var_name(i); i++)
		;
	roots.sysfs = ff.f[2];
	roots.dev = (data[6] & 1) ? NULL : ff.f[3];
	roots.opt = ff.f[8];
	argv = sq_efa_hook_argv(ff.f[4], &roots, &req);
	if (argv == NULL)
		abort();
	sq_efa_argv_free(argv);
	fz_free(&ff);
	return 0;
}
