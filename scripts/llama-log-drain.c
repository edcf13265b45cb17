/*
 * LD_PRELOAD helper for the llama.cpp tools under test.
 *
 * The tools print through an asynchronous logger whose queue is drained by a
 * worker thread and never flushed at exit, so when a tool fails and exits right
 * away its last lines (usually the error we want) are often lost. Waiting a
 * moment at exit lets the worker write them. Nothing else changes.
 */
#include <stdlib.h>
#include <time.h>

static void wait_for_log_worker(void) {
  struct timespec pause = {0, 200 * 1000 * 1000};
  nanosleep(&pause, NULL);
}

/* Registered before main, so it runs after every handler the tool registers. */
__attribute__((constructor)) static void register_exit_wait(void) {
  atexit(wait_for_log_worker);
}
