#!/usr/bin/env bash
# mpirun.sh NP PROGRAM [ARGS...] - runs PROGRAM as a job of NP processes on
# this machine with Open MPI's mpirun (or another MPI's mpiexec), the way the
# MPI tests do: oversubscribed (more ranks than cores), unbound, shared memory
# without the single-copy mechanism containers often forbid, and with leak
# detection off under AddressSanitizer (MPI libraries keep allocations until
# exit). Exits 77 (meson's skip) when no launcher is installed.
set -u
np=$1
shift
launcher=$(command -v mpirun || command -v mpiexec || true)
if [ -z "$launcher" ]; then
  echo "mpirun.sh: no mpirun or mpiexec on PATH: skipped" >&2
  exit 77
fi
args=(-np "$np")
if "$launcher" --version 2>&1 | grep -qi 'open mpi\|open-mpi\|OpenRTE'; then
  args+=(--oversubscribe --bind-to none)
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_rmaps_base_oversubscribe=1
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
exec "$launcher" "${args[@]}" "$@"
