/*
 * The fake-library kit's C side: every fake vendor library in the tests includes this file.
 *
 * A fake answers from a scenario the test writes as JSON; the kit's Python side flattens it
 * into one "key<TAB>value" line per leaf (dotted paths, list items by position, and
 * "<list>.#" holding each list's length), and the file is named by an environment variable
 * each fake chooses (FL_SCENARIO_ENV), so two fakes in one process never read each other's.
 *
 * Everything here is static: each fake gets its own copy, and no kit symbol is exported from
 * a fake library, so two fakes loaded into one process cannot interpose on each other.
 *
 * The faults every vendor's fake expresses the same way:
 *   init <code>                         the library's init answers <code> (driver not loaded…)
 *   devices.#                           how many devices (0: a node without any)
 *   faults.<entry> <code>               <entry> answers <code> on every device
 *   devices.<n>.faults.<entry> <code>   … on device n only (not supported, no permission…)
 *   hang.<entry> <seconds>              <entry> blocks that long (0: until the process ends)
 *   devices.<n>.lost 1                  the device answers every call with "lost"
 *   devices.<n>.lost_after <k>          … after answering k identity reads (lost mid-read)
 *   devices.<n>.lost_within <k>         … right after answering its k-th identity read, so the
 *                                       rest of that same read answers "lost" (a fake that
 *                                       honours it calls fl_identity_answered)
 *   devices.<n>.gone_after <k>          the device leaves enumeration after k enumerations
 *   devices.<n>.grow <k>                k processes start between a size probe and the read
 *   devices.<n>.grow_always 1           … and again before every read (never fits)
 *
 * NVML-family GPM (NVIDIA, T-Head): `fl_gpm_*` below are the sample buffers such a fake hands
 * out, stamped with the monotonic time they were taken, a count of those still allocated and
 * one of those taken and one of those allocated (exported by the fake as fake_gpm_live_samples,
 * fake_gpm_samples_taken and fake_gpm_samples_allocated, so a test can see a reader free them,
 * take one per partition per read and reuse its buffers).
 */
#ifndef FAKELIB_H
#define FAKELIB_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef FL_SCENARIO_ENV
#error "define FL_SCENARIO_ENV: the environment variable naming this fake's scenario file"
#endif

/* Every kit function is private to the fake that includes it; a fake need not use them all. */
#define FL_API static __attribute__((unused))

#define FL_MAX_ENTRIES 8192
#define FL_MAX_DEVICES 64

typedef struct {
    char *key;
    char *value;
} fl_entry_t;

static fl_entry_t fl_table[FL_MAX_ENTRIES];
static int fl_entries;
static int fl_identity_reads[FL_MAX_DEVICES];
static int fl_enumerations;
static int fl_grown[FL_MAX_DEVICES];
static int fl_fallen[FL_MAX_DEVICES];

FL_API int fl_compare(const void *a, const void *b) {
    return strcmp(((const fl_entry_t *)a)->key, ((const fl_entry_t *)b)->key);
}

FL_API void fl_clear(void) {
    for (int i = 0; i < fl_entries; i++) {
        free(fl_table[i].key);
        free(fl_table[i].value);
    }
    fl_entries = 0;
    fl_enumerations = 0;
    memset(fl_identity_reads, 0, sizeof fl_identity_reads);
    memset(fl_grown, 0, sizeof fl_grown);
    memset(fl_fallen, 0, sizeof fl_fallen);
}

/* Read the scenario named by $FL_SCENARIO_ENV. 0: loaded; -1: no variable; -2: unreadable. */
FL_API int fl_load(void) {
    const char *path = getenv(FL_SCENARIO_ENV);
    char line[4096];
    FILE *f;
    if (!path)
        return -1;
    f = fopen(path, "r");
    if (!f)
        return -2;
    fl_clear();
    while (fgets(line, sizeof line, f) && fl_entries < FL_MAX_ENTRIES) {
        char *tab = strchr(line, '\t');
        line[strcspn(line, "\r\n")] = 0;
        if (!tab)
            continue;
        *tab = 0;
        fl_table[fl_entries].key = strdup(line);
        fl_table[fl_entries].value = strdup(tab + 1);
        fl_entries++;
    }
    fclose(f);
    qsort(fl_table, (size_t)fl_entries, sizeof fl_table[0], fl_compare);
    return 0;
}

FL_API const char *fl_vget(const char *fmt, va_list args) {
    char key[512];
    fl_entry_t probe, *hit;
    vsnprintf(key, sizeof key, fmt, args);
    probe.key = key;
    hit = bsearch(&probe, fl_table, (size_t)fl_entries, sizeof fl_table[0], fl_compare);
    return hit ? hit->value : NULL;
}

/* The value at a formatted key, or NULL. */
FL_API const char *fl_get(const char *fmt, ...) {
    va_list args;
    const char *value;
    va_start(args, fmt);
    value = fl_vget(fmt, args);
    va_end(args);
    return value;
}

FL_API const char *fl_str(const char *fallback, const char *fmt, ...) {
    va_list args;
    const char *value;
    va_start(args, fmt);
    value = fl_vget(fmt, args);
    va_end(args);
    return value ? value : fallback;
}

FL_API long long fl_int(long long fallback, const char *fmt, ...) {
    va_list args;
    const char *value;
    va_start(args, fmt);
    value = fl_vget(fmt, args);
    va_end(args);
    return value ? strtoll(value, NULL, 10) : fallback;
}

FL_API unsigned long long fl_u64(unsigned long long fallback, const char *fmt, ...) {
    va_list args;
    const char *value;
    va_start(args, fmt);
    value = fl_vget(fmt, args);
    va_end(args);
    return value ? strtoull(value, NULL, 10) : fallback;
}

FL_API double fl_double(double fallback, const char *fmt, ...) {
    va_list args;
    const char *value;
    va_start(args, fmt);
    value = fl_vget(fmt, args);
    va_end(args);
    return value ? strtod(value, NULL) : fallback;
}

/* The length of a list ("<prefix>.#"), 0 when absent. */
FL_API int fl_count(const char *fmt, ...) {
    char prefix[480], key[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, args);
    va_end(args);
    snprintf(key, sizeof key, "%s.#", prefix);
    return (int)fl_int(0, "%s", key);
}

/* The code `entry` must answer on device `dev` (-1: no device), or 0 to go on. */
FL_API int fl_fault(const char *entry, int dev) {
    const char *value = dev >= 0 ? fl_get("devices.%d.faults.%s", dev, entry) : NULL;
    if (!value)
        value = fl_get("faults.%s", entry);
    return value ? atoi(value) : 0;
}

/* Block when the scenario says this entry point hangs: like a driver call stuck in the kernel. */
FL_API void fl_hang(const char *entry) {
    const char *value = fl_get("hang.%s", entry);
    struct timespec step = {0, 50 * 1000 * 1000};
    double seconds, waited = 0;
    if (!value)
        return;
    seconds = strtod(value, NULL);
    while (seconds <= 0 || waited < seconds) {
        nanosleep(&step, NULL);
        waited += 0.05;
    }
}

/* Count one identity read of device `dev` (the fake's UUID getter calls this). */
FL_API void fl_identity_read(int dev) {
    if (dev >= 0 && dev < FL_MAX_DEVICES)
        fl_identity_reads[dev]++;
}

/* Device `dev` has just answered an identity read: with `lost_within` k, the k-th such answer
 * is its last, and every call after it (in the same read too) answers "lost". */
FL_API void fl_identity_answered(int dev) {
    long long within = fl_int(0, "devices.%d.lost_within", dev);
    if (dev >= 0 && dev < FL_MAX_DEVICES && within > 0 && fl_identity_reads[dev] >= within)
        fl_fallen[dev] = 1;
}

/* Whether device `dev` has fallen off: "lost", answered more identity reads than allowed, or
 * fell off inside a read (`lost_within`). */
FL_API int fl_lost(int dev) {
    long long after = fl_int(0, "devices.%d.lost_after", dev);
    if (fl_int(0, "devices.%d.lost", dev))
        return 1;
    if (dev >= 0 && dev < FL_MAX_DEVICES && fl_fallen[dev])
        return 1;
    return dev >= 0 && dev < FL_MAX_DEVICES && after > 0 && fl_identity_reads[dev] > after;
}

/* Count one enumeration of the devices (the fake's device-count getter calls this). */
FL_API void fl_enumerate(void) { fl_enumerations++; }

/* Whether device `dev` is still enumerated ("gone_after" enumerations and it disappears). */
FL_API int fl_present(int dev) {
    long long after = fl_int(0, "devices.%d.gone_after", dev);
    return !(after > 0 && fl_enumerations > after);
}

/* The devices still enumerated, in order, written to `out`; returns how many. */
FL_API int fl_present_devices(int *out, int capacity) {
    int n = 0, total = fl_count("devices");
    for (int i = 0; i < total && n < capacity; i++)
        if (fl_present(i))
            out[n++] = i;
    return n;
}

/* Rows beyond the scenario's `listed` ones that a process-list call must report: processes
 * that started after the caller's size probe. A probe (`reading` 0) sees those that started
 * before it; a read with room for `capacity` rows sees them start: once ("grow" rows that then
 * stay), or always just more than the caller allowed for ("grow_always"). */
FL_API int fl_extra_rows(int dev, int reading, int listed, int capacity) {
    long long grow = fl_int(0, "devices.%d.grow", dev);
    if (grow <= 0 || dev < 0 || dev >= FL_MAX_DEVICES)
        return 0;
    if (fl_int(0, "devices.%d.grow_always", dev)) {
        int extra = capacity + (int)grow - listed;
        return reading && extra > 0 ? extra : 0;
    }
    if (reading)
        fl_grown[dev] = 1;
    return fl_grown[dev] ? (int)grow : 0;
}

/* Seconds on the monotonic clock, as a library stamps its samples. */
FL_API double fl_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

#define FL_GPM_MAGIC 0x47504d31u
/* The interval below which two GPM samples are not comparable (nvml.h: "greater than 100ms"). */
#define FL_GPM_MIN_INTERVAL 0.1

typedef struct {
    unsigned magic; /* FL_GPM_MAGIC while allocated */
    int dev;        /* the card sampled; -1 until taken */
    long long gi;   /* the GPU instance sampled */
    double at;      /* when, on the monotonic clock */
} fl_gpm_sample_t;

static int fl_gpm_live __attribute__((unused));  /* samples allocated and not freed */
static int fl_gpm_taken __attribute__((unused)); /* samples taken since the library was loaded */
static int fl_gpm_allocated __attribute__((unused)); /* buffers allocated since it was loaded */

FL_API fl_gpm_sample_t *fl_gpm_alloc(void) {
    fl_gpm_sample_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->magic = FL_GPM_MAGIC;
    s->dev = -1;
    fl_gpm_live++;
    fl_gpm_allocated++;
    return s;
}

FL_API int fl_gpm_valid(const fl_gpm_sample_t *s) { return s && s->magic == FL_GPM_MAGIC; }

/* 0: freed; -1: not a live sample (freed twice, or never allocated here). */
FL_API int fl_gpm_free(fl_gpm_sample_t *s) {
    if (!fl_gpm_valid(s))
        return -1;
    s->magic = 0;
    free(s);
    fl_gpm_live--;
    return 0;
}

FL_API void fl_gpm_take(fl_gpm_sample_t *s, int dev, long long gi) {
    s->dev = dev;
    s->gi = gi;
    s->at = fl_now();
    fl_gpm_taken++;
}

/* The MIG entry of device `dev` whose GPU instance is `gi`, or -1. */
FL_API int fl_mig_of_instance(int dev, long long gi) {
    for (int m = 0; m < fl_count("devices.%d.migs", dev); m++)
        if (fl_int(-1, "devices.%d.migs.%d.gi", dev, m) == gi)
            return m;
    return -1;
}

#endif
