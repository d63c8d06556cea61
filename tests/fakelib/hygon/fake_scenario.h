/*
 * For the Hygon fakes whose real library has no init call (libhydmi, libhydmi_mig): the
 * scenario is read again whenever the file named by the fake's variable changes, so one
 * loaded library answers each test from that test's scenario.
 */
#ifndef HYGON_FAKE_SCENARIO_H
#define HYGON_FAKE_SCENARIO_H

#include <sys/stat.h>

#include "fakelib.h"

/* 0: a scenario is loaded and current; -1: none is named or readable. */
static int fake_current(void) {
    static char last_path[1024];
    static struct stat last;
    static int loaded;
    struct stat now;
    const char *path = getenv(FL_SCENARIO_ENV);
    if (!path || stat(path, &now) != 0)
        return -1;
    if (loaded && strcmp(path, last_path) == 0 && now.st_ino == last.st_ino &&
        now.st_size == last.st_size && now.st_mtim.tv_sec == last.st_mtim.tv_sec &&
        now.st_mtim.tv_nsec == last.st_mtim.tv_nsec)
        return 0;
    if (fl_load() != 0)
        return -1;
    snprintf(last_path, sizeof last_path, "%s", path);
    last = now;
    loaded = 1;
    return 0;
}

#endif
