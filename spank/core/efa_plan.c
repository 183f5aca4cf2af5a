/*
 * efa_plan.c: from (node, image, request) to the variables, mounts and warnings of
 * a step, or to the one-line refusal of `require`. Pure: no I/O.
 */
#include <stdlib.h>
#include <string.h>

#include "efa.h"
#include "options.h"
#include "strbuf.h"

/* Everything a plan may set; the plugin passes the ones the user set (they win). */
static const char *const managed[] = {
	"MELLANOX_VISIBLE_DEVICES", "NCCL_NET_PLUGIN", "NCCL_NET", "NCCL_SOCKET_IFNAME",
	"FI_EFA_USE_HUGE_PAGE", "LD_LIBRARY_PATH", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS",
	/* never set, but listed so a user value on g5/g6 can be warned about */
	"FI_EFA_USE_DEVICE_RDMA",
	NULL
};

const char *sq_efa_var_name(int i)
{
	if (i < 0 || i >= (int)(sizeof(managed) / sizeof(managed[0])))
		return NULL;
	return managed[i];
}

/* Container-side install prefixes: the host's trees are mounted at the same
 * /opt/amazon/<name> the EFA installer uses, whatever the host's opt root is. */
#define CONTAINER_OPT "/opt/amazon"

static int user_set(const struct sq_efa_request *req, const char *name)
{
	const char *p = req->user_set;
	size_t n = strlen(name);

	while (p && *p) {
		size_t len = strcspn(p, ",");

		if (len == n && strncmp(p, name, n) == 0)
			return 1;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

static void set_var(struct sq_buf *env, const struct sq_efa_request *req,
		    const char *name, const char *value)
{
	if (user_set(req, name))
		return;
	sq_buf_addf(env, "%s=%s\n", name, value);
}

static const char *type_or(const struct sq_efa_node *node)
{
	return node->instance_type[0] ? node->instance_type : "unknown instance type";
}

static int safe_path(const char *s)
{
	for (; *s; s++)
		if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\\' || *s == '\r')
			return 0;
	return 1;
}

static int safe_level(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
			return 0;
	return 1;
}

/* Host-level checks and warnings: the same answer before and inside the container. */
static int check_host(const struct sq_efa_node *node, int require, int report,
		      struct sq_buf *warn, char *err, size_t errlen)
{
	if (node->n_uverbs == 0) {
		if (require)
			return sq_errf(err, errlen, "--container-efa=require: this node (%s) has "
				       "%d EFA device(s) in sysfs but no /dev/infiniband/uverbs*: "
				       "load the ib_uverbs module or reinstall the EFA driver",
				       type_or(node), node->n_devices);
		if (report)
			sq_buf_addf(warn, "squall: warning: EFA devices but no /dev/infiniband/"
				    "uverbs* on this node: NCCL will fall back to TCP sockets; "
				    "load the ib_uverbs module\n");
		return 1;
	}
	/* memlock is checked once, before the container: the hook (report == 0) runs
	 * where the plugin already refused or warned. */
	if (report && node->memlock >= 0 && node->memlock < SQ_EFA_MEMLOCK_MIN) {
		if (require)
			return sq_errf(err, errlen, "--container-efa=require: memlock limit is "
				       "%lld KiB, below 16 GiB: set LimitMEMLOCK=infinity for slurmd "
				       "and `ulimit -l unlimited` for jobs", node->memlock / 1024);
		sq_buf_addf(warn, "squall: warning: memlock limit is %lld KiB, below 16 GiB: "
				    "EFA may fail to register memory; set LimitMEMLOCK=infinity for "
				    "slurmd and `ulimit -l unlimited`\n", node->memlock / 1024);
	}
	if (report && node->profile_known && node->n_devices < node->profile_max_efa)
		sq_buf_addf(warn, "squall: warning: %s has %d EFA interfaces, found %d: check "
			    "this node's EFA devices (fi_info -p efa) before a large job\n",
			    node->instance_type, node->profile_max_efa, node->n_devices);
	return 0;
}

static void add_ld_dir(struct sq_buf *ld, const struct sq_efa_lib *host, const char *opt)
{
	/* host dir <opt>/<name>/<libdir> -> CONTAINER_OPT/<name>/<libdir> */
	size_t n = strlen(opt);

	if (ld->len)
		sq_buf_addc(ld, ':');
	sq_buf_addf(ld, CONTAINER_OPT "%s", host->dir + n);
}

static void add_mount(struct sq_buf *fstab, const struct sq_efa_lib *host, const char *opt)
{
	sq_buf_addf(fstab, "%s " CONTAINER_OPT "%s none x-create=dir,bind,ro,nosuid,nodev\n",
		    host->prefix, host->prefix + strlen(opt));
}

/* One plan being made: what it is made from, what it writes, where its error goes. */
struct plan_ctx {
	const struct sq_efa_node *node;
	const struct sq_efa_image *image;   /* NULL: the host-level plan, before the container */
	const struct sq_efa_request *req;
	int require;
	struct sq_buf env, fstab, warn;
	char *err;
	size_t errlen;
};

/* Neither the image nor the host has a library EFA needs: refused under require, else
 * warned (NCCL falls back to TCP sockets). Returns 1 (plan inactive) or -1. */
static int no_library(struct plan_ctx *c, int no_ofi)
{
	const char *opt = c->node->opt_root;
	const char *what = no_ofi ? "aws-ofi-nccl (libnccl-net*.so)" : "libfabric";
	const char *where = no_ofi ? "ofi-nccl" : "efa";
	char shown[SQ_SHOW_MAX];

	if (c->require)
		return sq_errf(c->err, c->errlen, "--container-efa=require: no %s in the image "
			       "nor under %s/%s on the host: install it in the image (EFA "
			       "installer with --skip-kmod) or on the node", what,
			       opt[0] ? sq_show(opt, shown, sizeof(shown)) : "/opt/amazon", where);
	sq_buf_addf(&c->warn, "squall: warning: this node has EFA but no %s in the image "
		    "nor under %s/%s on the host: NCCL will use TCP sockets\n", what,
		    opt[0] ? sq_show(opt, shown, sizeof(shown)) : "/opt/amazon", where);
	return 1;
}

/* The host's libraries the image lacks, mounted under CONTAINER_OPT, and the container's
 * LD_LIBRARY_PATH to find them: in front of the image's own, or left to the job when it
 * set one itself. */
static int inject_host_libs(struct plan_ctx *c, int inject_fab, int inject_ofi)
{
	const struct sq_efa_node *node = c->node;
	const struct sq_efa_request *req = c->req;
	struct sq_buf ld;
	int rc = 0;

	sq_buf_init(&ld);
	if (inject_fab) {
		add_mount(&c->fstab, &node->libfabric, node->opt_root);
		add_ld_dir(&ld, &node->libfabric, node->opt_root);
	}
	if (inject_ofi) {
		add_mount(&c->fstab, &node->ofi_nccl, node->opt_root);
		add_ld_dir(&ld, &node->ofi_nccl, node->opt_root);
	}
	if (user_set(req, "LD_LIBRARY_PATH"))
		sq_buf_addf(&c->warn, "squall: warning: LD_LIBRARY_PATH is set in the job, so "
			    "squall leaves it: add %s to it or NCCL falls back to TCP "
			    "sockets\n", ld.data ? ld.data : "");
	else if (req->ld_library_path && strchr(req->ld_library_path, '\n'))
		rc = sq_errf(c->err, c->errlen, "LD_LIBRARY_PATH of the container holds a "
			     "newline: fix the image's /etc/environment");
	else if (req->ld_library_path && *req->ld_library_path)
		sq_buf_addf(&c->env, "LD_LIBRARY_PATH=%s:%s\n", ld.data ? ld.data : "",
			    req->ld_library_path);
	else
		sq_buf_addf(&c->env, "LD_LIBRARY_PATH=%s\n", ld.data ? ld.data : "");
	sq_buf_release(&ld);
	return rc;
}

/* NCCL's settings for the plugin in use; under require also NCCL_NET, so that NCCL fails
 * rather than falls back to sockets. */
static void set_nccl_vars(struct plan_ctx *c, const struct sq_efa_lib *ofi)
{
	if (ofi->plugin_suffix[0])
		set_var(&c->env, c->req, "NCCL_NET_PLUGIN", ofi->plugin_suffix);
	set_var(&c->env, c->req, "NCCL_SOCKET_IFNAME", "^docker,lo,veth");
	set_var(&c->env, c->req, "FI_EFA_USE_HUGE_PAGE", "0");
	if (!c->require)
		return;
	if (ofi->net_name[0])
		set_var(&c->env, c->req, "NCCL_NET", ofi->net_name);
	else if (!user_set(c->req, "NCCL_NET"))
		sq_buf_addf(&c->warn, "squall: warning: could not read the network name from "
			    "%s/%s, so NCCL_NET is not set and NCCL may still fall back to "
			    "sockets: set NCCL_NET=Libfabric (plugin 1.12+) or 'AWS "
			    "Libfabric'\n", ofi->dir, ofi->file);
}

/* What the image-level plan adds: libraries, plugin selection, NCCL settings. */
static int plan_image(struct plan_ctx *c)
{
	const struct sq_efa_node *node = c->node;
	const struct sq_efa_image *image = c->image;
	int inject_fab = !image->libfabric.dir[0] && node->libfabric.dir[0];
	int inject_ofi = !image->ofi_nccl.dir[0] && node->ofi_nccl.dir[0];
	const struct sq_efa_lib *ofi = image->ofi_nccl.dir[0] ? &image->ofi_nccl : &node->ofi_nccl;
	int have_fab = image->libfabric.dir[0] || inject_fab;
	char shown[SQ_SHOW_MAX];

	if (!have_fab || !ofi->dir[0])
		return no_library(c, !ofi->dir[0]);
	if ((inject_fab || inject_ofi) && !safe_path(node->opt_root))
		return sq_errf(c->err, c->errlen, "EFA library root '%s' contains a blank or "
			       "backslash, which fstab lines cannot carry: install under a plain "
			       "path such as /opt/amazon",
			       sq_show(node->opt_root, shown, sizeof(shown)));
	if ((inject_fab || inject_ofi) && inject_host_libs(c, inject_fab, inject_ofi) != 0)
		return -1;
	set_nccl_vars(c, ofi);
	return 0;
}

/* The plan's variables, mounts and warnings into c: 1 EFA is used, 0 it is not (off, no
 * device, or warned why), -1 refused. */
static int plan_efa(struct plan_ctx *c)
{
	const struct sq_efa_node *node = c->node;
	int rc;

	if (c->req->mode == SQ_EFA_SETTING_OFF)
		return 0;
	if (node->n_devices == 0) {
		if (c->require)
			return sq_errf(c->err, c->errlen, "--container-efa=require: this node (%s) "
				       "has no EFA device (no infiniband device with the efa "
				       "driver): run on an EFA-enabled instance or use "
				       "--container-efa=auto", type_or(node));
		return 0; /* auto without EFA: nothing, silently */
	}
	rc = check_host(node, c->require, c->image == NULL, &c->warn, c->err, c->errlen);
	if (rc != 0)
		return rc < 0 ? -1 : 0; /* > 0: auto on a node that cannot use EFA: warned */
	if (user_set(c->req, "FI_EFA_USE_DEVICE_RDMA") && node->profile_rdma_read == 0 &&
	    c->image == NULL)
		sq_buf_addf(&c->warn, "squall: warning: FI_EFA_USE_DEVICE_RDMA is set but %s has "
			    "no RDMA read: libfabric aborts with 'EFA device has no rdma-read "
			    "capability'; unset it\n", node->instance_type);

	/* Enroot's Mellanox hook would hide /sys/class/infiniband otherwise. */
	set_var(&c->env, c->req, "MELLANOX_VISIBLE_DEVICES", "void");
	if (c->image == NULL)
		return 1;
	rc = plan_image(c);
	return rc < 0 ? -1 : rc == 0;
}

int sq_efa_plan(const struct sq_efa_node *node, const struct sq_efa_image *image,
		const struct sq_efa_request *req, struct sq_efa_plan *plan,
		char *err, size_t errlen)
{
	struct plan_ctx c = { .node = node, .image = image, .req = req,
			      .require = req->mode == SQ_EFA_SETTING_REQUIRE,
			      .err = err, .errlen = errlen };
	int rc;

	memset(plan, 0, sizeof(*plan));
	if (req->mode != SQ_EFA_SETTING_UNSET && req->mode != SQ_EFA_SETTING_AUTO &&
	    req->mode != SQ_EFA_SETTING_REQUIRE && req->mode != SQ_EFA_SETTING_OFF)
		return sq_errf(err, errlen, "unknown EFA mode %d: use auto, require or off",
			       req->mode);
	if (req->nccl_debug && *req->nccl_debug && !safe_level(req->nccl_debug))
		return sq_errf(err, errlen, "--container-nccl-debug: a level is letters only, "
			       "e.g. INFO");
	sq_buf_init(&c.env);
	sq_buf_init(&c.fstab);
	sq_buf_init(&c.warn);
	rc = plan_efa(&c);
	if (rc < 0) {
		sq_buf_release(&c.env);
		sq_buf_release(&c.fstab);
		sq_buf_release(&c.warn);
		return -1;
	}
	plan->active = rc;
	/* Diagnostics are wanted on any node (they show a socket fallback too), so they
	 * belong to the host-level plan whatever the mode. */
	if (!image && req->nccl_debug && *req->nccl_debug) {
		set_var(&c.env, req, "NCCL_DEBUG", req->nccl_debug);
		set_var(&c.env, req, "NCCL_DEBUG_SUBSYS", "INIT,NET");
	}
	plan->env = sq_buf_take(&c.env);
	plan->fstab = sq_buf_take(&c.fstab);
	plan->warnings = sq_buf_take(&c.warn);
	if (!plan->env || !plan->fstab || !plan->warnings) {
		sq_efa_plan_free(plan);
		return sq_errf(err, errlen, "out of memory while planning EFA injection");
	}
	return 0;
}

void sq_efa_plan_free(struct sq_efa_plan *plan)
{
	if (!plan)
		return;
	free(plan->env);
	free(plan->fstab);
	free(plan->warnings);
	memset(plan, 0, sizeof(*plan));
}
