/*
 * mpi_absent.c - comm/transport.h in a build without MPI (meson option
 * `mpi` not found): there is no MPI transport, every job of processes is
 * one process (single.c).
 */
#include "runtime/comm/transport.h"

const pp_comm_ops *pp_comm_mpi_ops(void) { return NULL; }
