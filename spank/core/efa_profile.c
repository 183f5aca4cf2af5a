/*
 * efa_profile.c: the per-instance-type expectations, from efa_profiles.def.
 */
#include <string.h>

#include "efa.h"
#include "efa_internal.h"

struct sq_efa_profile {
	const char *type;
	int max_efa;
	int gdr;
	int rdma_read;
};

static const struct sq_efa_profile profiles[] = {
#define SQ_EFA_PROFILE(type, max_efa, gdr, rdma_read) { type, max_efa, gdr, rdma_read },
#include "efa_profiles.def"
#undef SQ_EFA_PROFILE
};

void sq_efa_profile_apply(struct sq_efa_node *node)
{
	node->profile_known = 0;
	node->profile_max_efa = 0;
	node->profile_gdr = -1;
	node->profile_rdma_read = -1;
	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++) {
		if (strcmp(profiles[i].type, node->instance_type) != 0)
			continue;
		node->profile_known = 1;
		node->profile_max_efa = profiles[i].max_efa;
		node->profile_gdr = profiles[i].gdr;
		node->profile_rdma_read = profiles[i].rdma_read;
		return;
	}
}
