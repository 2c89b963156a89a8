/*
 * train/signals.c - see signals.h.
 */
#define _POSIX_C_SOURCE 200809L /* sigaction */

#include "train/signals.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"

static volatile sig_atomic_t pending = 0;

static void on_signal(int sig) {
    pending = sig;
    /* the next one of this kind is not caught: SA_RESETHAND restored the default */
}

void signals_install(void) {
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART | SA_RESETHAND;   /* RESTART: a signal must not fail a read or an MPI call */
        if (sigaction(sigs[i], &sa, NULL) != 0) FATAL("sigaction(%s) failed", strsignal(sigs[i]));
    }
}

int signals_pending(void) { return (int)pending; }

int signals_stdout_ready(void) {
    struct pollfd p = {.fd = STDOUT_FILENO, .events = POLLOUT};
    for (;;) {
        /* 100 ms slices: a signal that lands between the check and poll() is seen within one */
        int n = poll(&p, 1, 100);
        if (n > 0) return 1;   /* room, or an error that the write itself will report */
        if (n < 0 && errno != EINTR) return 1;
        if (pending) return 0;
    }
}

const char* signals_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}
