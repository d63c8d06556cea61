/*
 * A fake librocm-core.so: getROCmVersion, the one entry point of ROCm/rocm-core's public
 * header the amd backend calls (to learn the ROCm release, and so whether amdsmi's process
 * list is known broken there). Answers the scenario's `rocm_version` ("7.2.0"), or the
 * scenario's `rocm_core_error` as its VerErrors code.
 */
#include "fakelib.h"
#include <stdint.h>

uint32_t getROCmVersion(uint32_t *major, uint32_t *minor, uint32_t *patch) {
    const char *version;
    unsigned a = 0, b = 0, c = 0;
    if (fl_load() != 0)
        return 1;
    if (fl_int(0, "rocm_core_error"))
        return (uint32_t)fl_int(0, "rocm_core_error");
    version = fl_str("7.0.2", "rocm_version");
    if (!major || !minor || !patch || sscanf(version, "%u.%u.%u", &a, &b, &c) != 3)
        return 1;
    *major = a;
    *minor = b;
    *patch = c;
    return 0;
}
