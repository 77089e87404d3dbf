/* signals.c - SIGTERM and SIGINT: stop after the step, a second one at once (signals.h). */
#include "cli/signals.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_first;   /* the first signal, 0 none */
static volatile sig_atomic_t g_again;   /* a second one came */
static volatile sig_atomic_t g_saving;  /* a save is under way */
static volatile sig_atomic_t g_first_s; /* monotonic second of the first signal */
static volatile sig_atomic_t g_first_ns;

static void on_signal(int sig)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    if (!g_first) {
        g_first_s = (sig_atomic_t)now.tv_sec;
        g_first_ns = (sig_atomic_t)now.tv_nsec;
        g_first = sig;
        return;
    }
    double since = (double)(now.tv_sec - g_first_s) + (double)(now.tv_nsec - g_first_ns) / 1e9;
    if (sig == g_first && since < 1.0) return; /* one signal delivered twice */
    g_again = 1;
    if (!g_saving) _exit(128 + g_first); /* nothing half-written: end now */
}

void pp_cli_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void on_signal_end(int sig)
{
    _exit(128 + sig);
}

void pp_cli_signals_install_end(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal_end;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int pp_cli_signal_first(void)
{
    return g_first;
}

bool pp_cli_signal_again(void *arg)
{
    (void)arg;
    return g_again != 0;
}

void pp_cli_signal_saving(bool on)
{
    g_saving = on; /* a second signal that came during the save is the caller's to see */
}

pp_status pp_cli_stop_agree(pp_comm *comm, int *sig, pp_error *err)
{
    *sig = g_first;
    if (pp_comm_size(comm) < 2) return PP_OK;
    float v[2] = {g_first && g_first != SIGINT, g_first == SIGINT};
    PP_TRY(pp_comm_allreduce_sum_f32(comm, v, 2, err));
    *sig = v[0] > 0 ? SIGTERM : v[1] > 0 ? SIGINT : 0;
    return PP_OK;
}

const char *pp_cli_signal_name(int sig)
{
    static char buf[32];
    if (sig == SIGTERM) return "SIGTERM";
    if (sig == SIGINT) return "SIGINT";
    snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}
