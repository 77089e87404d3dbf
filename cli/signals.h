/*
 * signals.h - how the program stops on SIGTERM (a batch system preempting a
 * job) and SIGINT (Ctrl-C).
 *
 * The first signal asks the run to stop: it finishes the step in flight,
 * saves what it was asked to save and exits 128 + the signal (143, 130).
 * A second one (of the other kind, or of the same kind more than a second
 * after the first: launchers that deliver one signal twice, to the process
 * and to its group, count once) ends the program at once: during a save
 * the write is abandoned (no file, no temporary left: pp_cli_signal_again
 * is the save's cancel callback); outside one the process exits
 * immediately with 128 + the first signal.
 *
 * In a job of several processes every rank stops after the same step:
 * pp_cli_stop_agree is a collective the run loop calls before each step.
 * Async-signal-safe state only; the functions are for the main thread.
 */
#ifndef PP_CLI_SIGNALS_H
#define PP_CLI_SIGNALS_H

#include <stdbool.h>

#include "runtime/comm/comm.h"

/* Installs the handlers of SIGTERM and SIGINT (system calls restart). */
void pp_cli_signals_install(void);

/* For the modes that have no step to stop after (--validate, --simulate,
 * --eval-only, --optimize ...): SIGTERM and SIGINT end
 * the process at once with 128 + the signal, writing nothing more (their
 * outputs are written whole at the end, or not at all). */
void pp_cli_signals_install_end(void);

/* The first signal this process received, 0 when none. */
int pp_cli_signal_first(void);

/* Whether a second signal came: the cancel callback of saves (arg unused). */
bool pp_cli_signal_again(void *arg);

/* Brackets a save: while on, a second signal abandons the save (through
 * pp_cli_signal_again) instead of ending the process. */
void pp_cli_signal_saving(bool on);

/* Collective over comm (every rank calls it, one process: no
 * communication): the signal that stops the job, SIGTERM before SIGINT
 * when ranks received different ones, or 0 to go on. *sig is set; a failed
 * exchange is returned with err filled. */
pp_status pp_cli_stop_agree(pp_comm *comm, int *sig, pp_error *err);

/* "SIGTERM", "SIGINT", "signal N". */
const char *pp_cli_signal_name(int sig);

#endif
