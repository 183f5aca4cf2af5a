/*
 * sqshpolicy.h: the site image policy for a .sqsh file named by path (docs/registries.md
 * "Local files").
 *
 * Pure. `sqshbuild policy compile` turns the transport squall-sqsh of the site's
 * /etc/containers/policy.json into lines the plugin reads at each step's start:
 *
 *     squall-policy-sqsh 1
 *     stamp DEV:INO:SIZE:MTIME_NS        (of the policy file it was compiled from)
 *     scope VERDICT PATH                 (one per scope; PATH absolute, may hold spaces)
 *     transport VERDICT                  (the transport's "" scope, when it has one)
 *     default VERDICT                    (the global default, when the transport exists)
 *
 * VERDICT is accept, reject, or signed (a scope that asks for a signature, which a file
 * cannot carry). A file with no scope, transport or default line judges no file: the
 * policy has no squall-sqsh transport, and every file runs, as before.
 */
#ifndef SQUALL_CORE_SQSHPOLICY_H
#define SQUALL_CORE_SQSHPOLICY_H

#include <stddef.h>

#define SQ_SQSHPOL_SCOPE_MAX 4096

enum { SQ_SQSHPOL_ACCEPT = 0, SQ_SQSHPOL_REJECT = 1, SQ_SQSHPOL_SIGNED = 2 };
/* Which part of the policy decided. */
enum { SQ_SQSHPOL_UNJUDGED = 0, SQ_SQSHPOL_SCOPE = 1, SQ_SQSHPOL_TRANSPORT = 2,
       SQ_SQSHPOL_DEFAULT = 3 };

struct sq_sqshpolicy_verdict {
	int verdict;                         /* SQ_SQSHPOL_ACCEPT ... */
	int where;                           /* SQ_SQSHPOL_UNJUDGED ... */
	char scope[SQ_SQSHPOL_SCOPE_MAX];    /* the scope's path when where is SCOPE, else "" */
};

/* 1 when text is a compiled policy whose stamp is stamp, else 0. */
int sq_sqshpolicy_fresh(const char *text, const char *stamp);
/* The verdict on the file whose real path is path (absolute, normalized): the longest
 * scope that is path or a directory above it, then the transport's "", then the default.
 * 0, or -1 when text is not a compiled policy. */
int sq_sqshpolicy_decide(const char *text, const char *path, struct sq_sqshpolicy_verdict *v);
/* The one line refusing image under the policy file policy_file: 0 with out set, -1 when v
 * accepts or out is too small. */
int sq_sqshpolicy_refusal(const char *policy_file, const char *image,
			  const struct sq_sqshpolicy_verdict *v, char *out, size_t outlen);

#endif
