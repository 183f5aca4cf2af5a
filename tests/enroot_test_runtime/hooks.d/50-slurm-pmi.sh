#!/bin/bash
# squall's Enroot TEST DOUBLE: Enroot's Slurm PMI hook (hooks.d/extra/50-slurm-pmi.sh, which
# sites enable by copying it into hooks.d; the test nodes have it enabled).
# In a Slurm step: the SLURM_* variables go into the container; with PMIx (srun
# --mpi=pmix) the PMIX_* variables too (PMIX_MCA_* from the server's module choices), and
# the PMIx server's and the step's application directories are bound at their own paths;
# with PMI/PMI2, the PMI_* variables.
set -euo pipefail
[ -n "${SLURM_JOB_ID-}" ] && [ -n "${SLURM_STEP_ID-}" ] || exit 0

for var in $(compgen -e SLURM_ || true); do
    printf '%s=%s\n' "$var" "${!var}" >>"$ENROOT_ENVIRON"
done

# bind DIR OPTS: DIR at its own path, in the short form Enroot's hook writes ("SRC OPTS";
# spaces escaped as fstab wants them).
bind() {
    local d=${1%/}
    d=${d// /\\040}
    printf '%s x-create=dir,bind,rw,nosuid,noexec,nodev,private%s\n' "$d" "$2" >>"$ENROOT_MOUNTS"
}

if [[ -z ${SLURM_MPI_TYPE-} || $SLURM_MPI_TYPE == pmix* ]] && compgen -e PMIX_ >/dev/null; then
    default_tmpdir=${TMPDIR:-${TEMP:-${TMP:-/tmp}}}
    system_tmpdir=${PMIX_SYSTEM_TMPDIR:-$default_tmpdir}
    server_tmpdir=${PMIX_SERVER_TMPDIR:-$default_tmpdir}
    for var in $(compgen -e PMIX_); do
        printf '%s=%s\n' "$var" "${!var}" >>"$ENROOT_ENVIRON"
    done
    if [ -n "${PMIX_PTL_MODULE-}" ] && [ -z "${PMIX_MCA_ptl-}" ]; then
        printf 'PMIX_MCA_ptl=%s\n' "$PMIX_PTL_MODULE" >>"$ENROOT_ENVIRON"
    fi
    if [ -n "${PMIX_SECURITY_MODE-}" ] && [ -z "${PMIX_MCA_psec-}" ]; then
        printf 'PMIX_MCA_psec=%s\n' "$PMIX_SECURITY_MODE" >>"$ENROOT_ENVIRON"
    fi
    if [ -n "${PMIX_GDS_MODULE-}" ] && [ -z "${PMIX_MCA_gds-}" ]; then
        printf 'PMIX_MCA_gds=%s\n' "$PMIX_GDS_MODULE" >>"$ENROOT_ENVIRON"
    fi
    appdir=$system_tmpdir/spmix_appdir_${SLURM_JOB_UID:-$(id -u)}_$SLURM_JOB_ID.$SLURM_STEP_ID
    [ -e "$appdir" ] || appdir=$system_tmpdir/spmix_appdir_$SLURM_JOB_ID.$SLURM_STEP_ID
    bind "$appdir" ",nofail"
    bind "$server_tmpdir" ""
fi

if compgen -e PMI_ >/dev/null; then
    for var in $(compgen -e PMI_); do
        printf '%s=%s\n' "$var" "${!var}" >>"$ENROOT_ENVIRON"
    done
fi
