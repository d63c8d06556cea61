/*
 * The kit's own fake: a library whose entry points expose the kit's helpers one for one, so the
 * tests of the kit exercise fakelib.h through ctypes exactly as a vendor's fake uses it.
 */
#include "fakelib.h"

int kit_init(void) {
    if (fl_load() != 0)
        return -1;
    return (int)fl_int(0, "init");
}

long long kit_int(const char *key, long long fallback) { return fl_int(fallback, "%s", key); }

const char *kit_str(const char *key) { return fl_str("(absent)", "%s", key); }

int kit_count(const char *key) { return fl_count("%s", key); }

int kit_fault(const char *entry, int dev) { return fl_fault(entry, dev); }

void kit_hang(const char *entry) { fl_hang(entry); }

/* One enumeration, as a vendor's device-count getter does it. */
int kit_devices(void) {
    int present[FL_MAX_DEVICES];
    fl_enumerate();
    return fl_present_devices(present, FL_MAX_DEVICES);
}

/* One identity read of `dev`, then whether it is lost. */
int kit_identity(int dev) {
    fl_identity_read(dev);
    return fl_lost(dev);
}

int kit_extra_rows(int dev, int reading, int listed, int capacity) {
    return fl_extra_rows(dev, reading, listed, capacity);
}
