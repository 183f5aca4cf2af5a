/*
 * efa_image.c: does the image ship its own libfabric and aws-ofi-nccl?
 * Looked up inside the image root (symlinks resolved within it), at the EFA
 * installer's paths and the usual library directories.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "efa.h"
#include "efa_internal.h"
#include "strbuf.h"

static const char *const fabric_dirs[] = {
	"opt/amazon/efa/lib", "opt/amazon/efa/lib64",
	"usr/local/lib", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
	"usr/lib64", "usr/lib",
	NULL
};

/* /opt/aws-ofi-nccl is where NGC-derived and Deep Learning Container images put it. */
static const char *const ofi_dirs[] = {
	"opt/amazon/ofi-nccl/lib", "opt/amazon/ofi-nccl/lib64",
	"opt/amazon/aws-ofi-nccl/lib", "opt/amazon/aws-ofi-nccl/lib64",
	"opt/aws-ofi-nccl/lib", "opt/aws-ofi-nccl/lib64",
	"usr/local/lib", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
	"usr/lib64", "usr/lib",
	NULL
};

int sq_efa_image_scan(const char *rootfs, struct sq_efa_image *image,
		      char *err, size_t errlen)
{
	char shown[SQ_SHOW_MAX];
	int rootfd;

	memset(image, 0, sizeof(*image));
	if (!rootfs || !*rootfs)
		return sq_errf(err, errlen, "no image root given: set ENROOT_ROOTFS "
			       "(squall-efa-hook runs from Enroot's hooks)");
	rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return sq_errf(err, errlen, "image root '%s' is not a directory: set "
			       "ENROOT_ROOTFS to the container's root", sq_show(rootfs, shown,
			       sizeof(shown)));
	sq_efa_find_lib(rootfd, fabric_dirs, "libfabric.so", 0, &image->libfabric);
	if (sq_efa_find_lib(rootfd, ofi_dirs, "libnccl-net", 1, &image->ofi_nccl))
		sq_efa_ofi_describe(rootfd, &image->ofi_nccl);
	close(rootfd);
	return 0;
}
