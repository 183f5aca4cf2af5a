/* seccomp.c: see seccomp.h. The BPF program is assembled from a table at run time. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "seccomp.h"

#ifndef SECCOMP_FILTER_FLAG_SPEC_ALLOW
#define SECCOMP_FILTER_FLAG_SPEC_ALLOW (1UL << 2)
#endif

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_ARCH AUDIT_ARCH_PPC64LE
#endif

#ifdef NATIVE_ARCH
/* The calls that "succeed" whatever their arguments. */
static const long faked[] = {
#ifdef SYS_chown
	SYS_chown,
#endif
#ifdef SYS_lchown
	SYS_lchown,
#endif
	SYS_fchown, SYS_fchownat,
	SYS_setuid, SYS_setgid, SYS_setreuid, SYS_setregid, SYS_setresuid, SYS_setresgid,
	SYS_setgroups,
};
#define NFAKED (sizeof(faked) / sizeof(faked[0]))

/* Low 32 bits of the first argument (setfsuid/setfsgid take a 32-bit id). */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG0_LOW offsetof(struct seccomp_data, args[0])
#else
#define ARG0_LOW (offsetof(struct seccomp_data, args[0]) + 4)
#endif

#define STMT(code, k) ((struct sock_filter){ (uint16_t)(code), 0, 0, (uint32_t)(k) })
#define JEQ(k, jt, jf) \
	((struct sock_filter){ BPF_JMP | BPF_JEQ | BPF_K, (uint8_t)(jt), (uint8_t)(jf), (uint32_t)(k) })

/* Layout, with n = NFAKED:
 *   0      load arch          1  native? skip     2  allow (another ABI)
 *   3      load nr            4 .. 3+n  faked call? -> succeed
 *   4+n    setfsuid? -> check 5+n  setfsgid? -> check, else   6+n  allow
 *   7+n    load arg0          8+n  -1? -> allow (a query), else succeed
 *   9+n    allow              10+n succeed (errno 0)                                    */
static size_t build(struct sock_filter *p)
{
	const size_t n = NFAKED, check = 7 + n, succeed = 10 + n;
	size_t k = 0;

	p[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	p[k++] = JEQ(NATIVE_ARCH, 1, 0);
	p[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	p[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	for (size_t i = 0; i < n; i++, k++)
		p[k] = JEQ(faked[i], succeed - k - 1, 0);
	p[k] = JEQ(SYS_setfsuid, check - k - 1, 0);
	k++;
	p[k] = JEQ(SYS_setfsgid, check - k - 1, 0);
	k++;
	p[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	p[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG0_LOW);
	p[k] = JEQ(0xffffffffU, 0, 1);
	k++;
	p[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	p[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0);
	return k;
}

static long set_filter(const struct sock_fprog *prog)
{
	long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW,
			  prog);

	if (rc < 0 && errno == EINVAL)   /* a kernel before 4.17 */
		rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog);
	return rc;
}

int sq_seccomp_install(char *err, size_t errlen)
{
	struct sock_filter prog[NFAKED + 16];
	struct sock_fprog fprog;

	fprog.len = (unsigned short)build(prog);
	fprog.filter = prog;
	if (set_filter(&fprog) == 0)
		return 0;
	/* Without CAP_SYS_ADMIN in our user namespace (a container sharing the node's), the
	 * kernel wants no_new_privs first, as Enroot sets it for unprivileged containers. */
	if (errno == EACCES && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	    set_filter(&fprog) == 0)
		return 0;
	snprintf(err, errlen, "cannot install the seccomp filter (seccomp: %s): the kernel must "
		 "have CONFIG_SECCOMP_FILTER", strerror(errno));
	return -1;
}
#else
int sq_seccomp_install(char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return 0;   /* an architecture Enroot's filter does not cover either */
}
#endif
