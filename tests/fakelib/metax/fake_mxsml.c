/*
 * A fake libmxsml.so for tests: the MXSML entry points the metax backend calls, compiled
 * against our own declarations (mxsml.h beside this file) and driven by the fake-library kit
 * (tests/fakelib): what it answers comes from the scenario named by $FAKE_MXSML_SCENARIO,
 * read at each mxSmlInit, with the kit's common faults (init code, faults per entry point,
 * hangs, a card lost after k identity reads, a card leaving enumeration, a process list that
 * grows between the probe and the read). The MXSML behaviours the backend depends on:
 *
 *   - mxSmlGetDeviceCount returns the count; there is no out-parameter;
 *   - SR-IOV virtual functions are enumerated beside physical cards (DeviceInfo.mode 2);
 *   - DeviceInfo.gpuId is the driver's own id of a card (by default its DRM card number,
 *     index + 1), while a process row's gpuId is the enumeration index: the two differ;
 *   - a process row lists every GPU the process uses, not only the one asked about;
 *   - the per-device process call writes at most the rows its buffer holds and sets the count
 *     to the number of processes (a count-0 probe with a one-row buffer writes nothing); a
 *     NULL buffer is InvalidInput; with `insufficient` set it answers InsufficientSize instead
 *     when the buffer is too small;
 *   - sGPU calls answer OperationNotSupport when sGPU mode is off or the slot is empty;
 *     _v3 rows carry the sGPU id, -1 for the whole card;
 *   - memory in KB, temperature x100, power per supply rail in mW, sGPU usage in 1/10000;
 *   - a second mxSmlInit does not look for cards again; mxSmlInitWithFlags(REINIT) does;
 *   - the health figures (issue 29): SRAM and DRAM ECC counts and retired pages, the
 *     clocks-throttle mask in MetaX's own bits, each clock domain's clocks in MHz (InvalidInput
 *     for a domain other than Xcore and Mc0; InsufficientSize with the count for a short
 *     buffer); all-ones values answered as the scenario gives them;
 *   - links (R-X3): the topology level of a pair (`topo` of either card, keyed by the other's
 *     scenario position; a pair in neither answers OperationNotSupport).
 *
 * Built variants (FakeLibrary.defines): FAKE_MXSML_NO_V3 and FAKE_MXSML_NO_V2 leave out those
 * process entry points, FAKE_MXSML_NO_ANNOTATIONS the sGPU annotations id (older libraries).
 *
 * Scenario (JSON, see tests/fakelib/metax/__init__.py): driver, devices[] of {uuid, name, bdf,
 * gpu_id, node_id, brand, mode, state, memory{vram_total, vram_used, vis_total, vis_used} (KB),
 * usage, temp (x100), power[] (mW per rail), sgpu_toggle, sgpus[]{id, uuid, vram_quota,
 * compute_quota, minor, usage, memory{total, used}, alias, annotations_id, faults{}},
 * insufficient, topo{<position>: level}} and processes[]{pid, name, gpus[]{device, memory, die, sgpu}} (device: a
 * position in devices[]), plus the kit's fault keys; lost_code is what a lost card answers.
 */
#include "fakelib.h"
#include "mxsml.h"

#define D "devices.%d."
#define P "processes.%d."

static int initialised;

/* The scenario position behind enumeration index `id`, or -1. */
static int device_at(unsigned int id) {
    int present[FL_MAX_DEVICES];
    int n = fl_present_devices(present, FL_MAX_DEVICES);
    return id < (unsigned int)n ? present[id] : -1;
}

/* The enumeration index of scenario position `d`, or -1 when it is not enumerated. */
static int index_of(int d) {
    int present[FL_MAX_DEVICES];
    int n = fl_present_devices(present, FL_MAX_DEVICES);
    for (int i = 0; i < n; i++)
        if (present[i] == d)
            return i;
    return -1;
}

/* The card behind an index, or -1; sets *rc to what the call must answer first. */
static int card(unsigned int id, const char *entry, mxsml_rc *rc) {
    int d, code;
    fl_hang(entry);
    if (!initialised) {
        *rc = MXSML_FAILURE;
        return -1;
    }
    d = device_at(id);
    if (d < 0) {
        *rc = MXSML_INVALID_DEVICE;
        return -1;
    }
    if (fl_lost(d)) {
        *rc = (mxsml_rc)fl_int(MXSML_NO_DEVICE, "lost_code");
        return -1;
    }
    code = fl_fault(entry, d);
    *rc = code ? (mxsml_rc)code : MXSML_OK;
    return code ? -1 : d;
}

#define CARD(entry)                                                                               \
    mxsml_rc rc;                                                                                  \
    int d = card(deviceId, entry, &rc);                                                           \
    if (d < 0)                                                                                    \
        return rc;

/* Copy with MXSML's in/out size: too small answers InsufficientSize with the size needed. */
static mxsml_rc copy_sized(char *out, unsigned int *size, const char *value) {
    unsigned int need = (unsigned int)strlen(value) + 1;
    if (!out || !size)
        return MXSML_INVALID_INPUT;
    if (*size < need) {
        *size = need;
        return MXSML_INSUFFICIENT_SIZE;
    }
    memcpy(out, value, need);
    *size = need;
    return MXSML_OK;
}

static void copy_fixed(char *out, size_t length, const char *value) {
    snprintf(out, length, "%s", value);
}

/* A repeated plain init keeps what the first one found ("will not refresh resources"); only
 * the REINIT flag reads the scenario again. */
mxsml_rc mxSmlInitWithFlags(unsigned int flags) {
    int code;
    if (!initialised || (flags & MXSML_INIT_REINIT)) {
        if (fl_load() != 0)
            return MXSML_FAILURE;
        if ((code = (int)fl_int(0, "init")) != 0)
            return (mxsml_rc)code;
        initialised = 1;
    }
    return fl_count("devices") == 0 ? MXSML_NO_DEVICE : MXSML_OK;
}

mxsml_rc mxSmlInit(void) { return mxSmlInitWithFlags(0); }

unsigned int mxSmlGetDeviceCount(void) {
    int present[FL_MAX_DEVICES];
    fl_hang("mxSmlGetDeviceCount");
    if (!initialised)
        return 0;
    fl_enumerate();
    return (unsigned int)fl_present_devices(present, FL_MAX_DEVICES);
}

mxsml_rc mxSmlGetDeviceInfo(unsigned int deviceId, mxSmlDeviceInfo_t *info) {
    int at = initialised ? device_at(deviceId) : -1;
    if (at >= 0)
        fl_identity_read(at); /* a card that falls off after `lost_after` of these */
    {
        CARD("mxSmlGetDeviceInfo");
        if (!info)
            return MXSML_INVALID_INPUT;
        memset(info, 0, sizeof *info);
        info->deviceId = deviceId;
        copy_fixed(info->bdfId, sizeof info->bdfId, fl_str("0000:00:00.0", D "bdf", d));
        info->gpuId = (unsigned int)fl_int(d + 1, D "gpu_id", d);
        info->nodeId = (unsigned int)fl_int(0, D "node_id", d);
        copy_fixed(info->uuid, sizeof info->uuid, fl_str("", D "uuid", d));
        info->brand = (unsigned int)fl_int(MXSML_BRAND_C, D "brand", d);
        info->mode = (unsigned int)fl_int(MXSML_MODE_NONE, D "mode", d);
        copy_fixed(info->deviceName, sizeof info->deviceName, fl_str("MXC500", D "name", d));
        return MXSML_OK;
    }
}

mxsml_rc mxSmlGetDeviceVersion(unsigned int deviceId, unsigned int unit, char *version,
                               unsigned int *size) {
    CARD("mxSmlGetDeviceVersion");
    if (unit != MXSML_VERSION_DRIVER)
        return MXSML_INVALID_INPUT;
    return copy_sized(version, size, fl_str("2.32.0.6", "driver"));
}

mxsml_rc mxSmlGetDeviceState(unsigned int deviceId, int *state) {
    CARD("mxSmlGetDeviceState");
    if (!state)
        return MXSML_INVALID_INPUT;
    *state = (int)fl_int(1, D "state", d);
    return MXSML_OK;
}

mxsml_rc mxSmlGetMemoryInfo(unsigned int deviceId, mxSmlMemoryInfo_t *memory) {
    CARD("mxSmlGetMemoryInfo");
    if (!memory)
        return MXSML_INVALID_INPUT;
    memory->vramTotal = (long)fl_int(0, D "memory.vram_total", d);
    memory->vramUse = (long)fl_int(0, D "memory.vram_used", d);
    memory->visVramTotal = (long)fl_int(memory->vramTotal, D "memory.vis_total", d);
    memory->visVramUse = (long)fl_int(memory->vramUse, D "memory.vis_used", d);
    memory->xttTotal = (long)fl_int(0, D "memory.xtt_total", d);
    memory->xttUse = (long)fl_int(0, D "memory.xtt_used", d);
    return MXSML_OK;
}

mxsml_rc mxSmlGetDeviceIpUsage(unsigned int deviceId, unsigned int ip, int *usage) {
    long long brand;
    CARD("mxSmlGetDeviceIpUsage");
    brand = fl_int(MXSML_BRAND_C, D "brand", d);
    /* Xcore is only valid on C-class cards, Dla only on N-class ones. */
    if (!usage || (ip == MXSML_USAGE_XCORE) != (brand == MXSML_BRAND_C))
        return MXSML_INVALID_INPUT;
    *usage = (int)fl_int(0, D "usage", d);
    return MXSML_OK;
}

mxsml_rc mxSmlGetTemperatureInfo(unsigned int deviceId, unsigned int sensor, int *temperature) {
    CARD("mxSmlGetTemperatureInfo");
    if (!temperature || sensor != MXSML_TEMPERATURE_HOTSPOT)
        return MXSML_INVALID_INPUT;
    *temperature = (int)fl_int(4000, D "temp", d); /* degrees C x 100 */
    return MXSML_OK;
}

/* -- the card's ECC, throttle reasons and clocks (issue 29) ---------------------------------- */

mxsml_rc mxSmlGetTotalEccErrors(unsigned int deviceId, mxSmlEccErrorCount_t *eccCounts) {
    CARD("mxSmlGetTotalEccErrors");
    if (!eccCounts)
        return MXSML_INVALID_INPUT;
    eccCounts->sramCE = (unsigned int)fl_u64(0, D "ecc.sram_ce", d);
    eccCounts->sramUE = (unsigned int)fl_u64(0, D "ecc.sram_ue", d);
    eccCounts->dramCE = (unsigned int)fl_u64(0, D "ecc.dram_ce", d);
    eccCounts->dramUE = (unsigned int)fl_u64(0, D "ecc.dram_ue", d);
    eccCounts->retiredPage = (unsigned int)fl_u64(0, D "ecc.retired", d);
    return MXSML_OK;
}

mxsml_rc mxSmlGetCurrentClocksThrottleReason(unsigned int deviceId,
                                             unsigned long long *clocksThrottleReasons) {
    CARD("mxSmlGetCurrentClocksThrottleReason");
    if (!clocksThrottleReasons)
        return MXSML_INVALID_INPUT;
    *clocksThrottleReasons = fl_u64(0, D "throttle", d); /* mxsmlClocksThrottleReason* bits */
    return MXSML_OK;
}

mxsml_rc mxSmlGetClocks(unsigned int deviceId, unsigned int clockIp, unsigned int *clocksSize,
                        unsigned int *clocksMhz) {
    const char *domain = clockIp == MXSML_CLOCK_XCORE ? "xcore"
                         : clockIp == MXSML_CLOCK_MC0 ? "mc0"
                                                      : NULL;
    const char *fault;
    unsigned int n;
    CARD("mxSmlGetClocks");
    if (!clocksSize || !clocksMhz || !domain)
        return MXSML_INVALID_INPUT; /* a domain not valid for this card */
    if ((fault = fl_get(D "clock_faults.%s", d, domain)) != NULL)
        return (mxsml_rc)atoi(fault);
    n = (unsigned int)fl_count(D "clocks.%s", d, domain);
    if (n == 0) { /* the fake's defaults, MHz: one clock per domain */
        if (*clocksSize < 1) {
            *clocksSize = 1;
            return MXSML_INSUFFICIENT_SIZE;
        }
        clocksMhz[0] = clockIp == MXSML_CLOCK_XCORE ? 1600u : 1800u;
        *clocksSize = 1;
        return MXSML_OK;
    }
    if (*clocksSize < n) {
        *clocksSize = n;
        return MXSML_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++)
        clocksMhz[i] = (unsigned int)fl_u64(0, D "clocks.%s.%d", d, domain, (int)i);
    *clocksSize = n;
    return MXSML_OK;
}

mxsml_rc mxSmlGetBoardPowerInfo(unsigned int deviceId, unsigned int *size,
                                mxSmlBoardWayElectricInfo_t *ways) {
    unsigned int n;
    CARD("mxSmlGetBoardPowerInfo");
    if (!size || !ways)
        return MXSML_INVALID_INPUT;
    n = (unsigned int)fl_count(D "power", d);
    if (*size < n) {
        *size = n;
        return MXSML_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        ways[i].voltage = 12000;
        ways[i].power = (unsigned int)fl_int(0, D "power.%u", d, i);
        ways[i].current = ways[i].power * 1000 / ways[i].voltage;
    }
    *size = n;
    return MXSML_OK;
}

/* -- processes --------------------------------------------------------------------------- */

/* Whether scenario process `p` uses scenario device `d`. */
static int uses(int p, int d) {
    for (int g = 0; g < fl_count(P "gpus", p); g++)
        if (fl_int(-1, P "gpus.%d.device", p, g) == d)
            return 1;
    return 0;
}

/* The scenario positions of the processes using device `d`, in order; returns how many. */
static int listed_on(int d, int *out, int capacity) {
    int n = 0;
    for (int p = 0; p < fl_count("processes") && n < capacity; p++)
        if (uses(p, d))
            out[n++] = p;
    return n;
}

/* One GPU entry of a row, whatever its version: the fields every version shares. */
static int gpu_entry(int p, int g, char *bdf, unsigned int *gpu, unsigned long *memory,
                     unsigned int *die, int *sgpu) {
    int device = (int)fl_int(-1, P "gpus.%d.device", p, g);
    int index = index_of(device);
    if (index < 0)
        return 0; /* a card no longer enumerated is not reported */
    copy_fixed(bdf, MXSML_BDF_LEN, fl_str("0000:00:00.0", D "bdf", device));
    *gpu = (unsigned int)index;
    *memory = (unsigned long)fl_u64(0, P "gpus.%d.memory", p, g);
    *die = (unsigned int)fl_int(0, P "gpus.%d.die", p, g);
    *sgpu = (int)fl_int(-1, P "gpus.%d.sgpu", p, g);
    return 1;
}

/* Fill row `i` of a buffer of version `version`: scenario process `p`, or (p < 0) a process
 * that started after the caller's probe, using only device `d`. */
static void fill_row(void *rows, int version, unsigned int i, int p, int d) {
    unsigned int *pid, *count;
    char *name;
    char bdf[MXSML_BDF_LEN];
    unsigned int gpu, die;
    unsigned long memory;
    int sgpu;
    mxSmlProcessInfo_t *r1 = (mxSmlProcessInfo_t *)rows + i;
    mxSmlProcessInfo_v2_t *r2 = (mxSmlProcessInfo_v2_t *)rows + i;
    mxSmlProcessInfo_v3_t *r3 = (mxSmlProcessInfo_v3_t *)rows + i;
    if (version == 1) {
        memset(r1, 0, sizeof *r1);
        pid = &r1->processId, name = r1->processName, count = &r1->gpuNumber;
    } else if (version == 2) {
        memset(r2, 0, sizeof *r2);
        pid = &r2->processId, name = r2->processName, count = &r2->gpuNumber;
    } else {
        memset(r3, 0, sizeof *r3);
        pid = &r3->processId, name = r3->processName, count = &r3->gpuNumber;
    }
    *pid = p >= 0 ? (unsigned int)fl_int(0, P "pid", p) : 900000 + i;
    copy_fixed(name, MXSML_PROCESS_NAME_LEN, p >= 0 ? fl_str("python3", P "name", p) : "late");
    *count = 0;
    for (int g = 0; p >= 0 ? g < fl_count(P "gpus", p) : g < 1; g++) {
        unsigned int k = *count;
        if (k >= MXSML_GPUS_PER_PROCESS)
            break;
        if (p >= 0) {
            if (!gpu_entry(p, g, bdf, &gpu, &memory, &die, &sgpu))
                continue;
        } else {
            copy_fixed(bdf, sizeof bdf, fl_str("0000:00:00.0", D "bdf", d));
            gpu = (unsigned int)index_of(d), memory = 1048576UL, die = 0, sgpu = -1;
        }
        if (version == 1) {
            copy_fixed(r1->processGpuInfo[k].bdfId, MXSML_BDF_LEN, bdf);
            r1->processGpuInfo[k].gpuId = gpu;
            r1->processGpuInfo[k].gpuMemoryUsage = memory;
        } else if (version == 2) {
            copy_fixed(r2->processGpuInfo[k].bdfId, MXSML_BDF_LEN, bdf);
            r2->processGpuInfo[k].gpuId = gpu;
            r2->processGpuInfo[k].gpuMemoryUsage = memory;
            r2->processGpuInfo[k].dieId = die;
        } else {
            copy_fixed(r3->processGpuInfo[k].bdfId, MXSML_BDF_LEN, bdf);
            r3->processGpuInfo[k].gpuId = gpu;
            r3->processGpuInfo[k].gpuMemoryUsage = memory;
            r3->processGpuInfo[k].dieId = die;
            r3->processGpuInfo[k].sgpuId = sgpu;
        }
        (*count)++;
    }
}

static mxsml_rc process_list(unsigned int deviceId, unsigned int *count, void *rows,
                             int version, const char *entry) {
    int listed[FL_MAX_ENTRIES / 8], n, extra;
    unsigned int capacity, total, written;
    CARD(entry);
    if (!count || !rows)
        return MXSML_INVALID_INPUT;
    n = listed_on(d, listed, (int)(sizeof listed / sizeof listed[0]));
    capacity = *count;
    extra = fl_extra_rows(d, capacity > 0, n, (int)capacity);
    total = (unsigned int)(n + extra);
    if (capacity < total && fl_int(0, D "insufficient", d)) {
        *count = total;
        return MXSML_INSUFFICIENT_SIZE;
    }
    written = capacity < total ? capacity : total;
    for (unsigned int i = 0; i < written; i++)
        fill_row(rows, version, i, i < (unsigned int)n ? listed[i] : -1, d);
    *count = total;
    return MXSML_OK;
}

mxsml_rc mxSmlGetSingleGpuProcess(unsigned int deviceId, unsigned int *count,
                                  mxSmlProcessInfo_t *rows) {
    return process_list(deviceId, count, rows, 1, "mxSmlGetSingleGpuProcess");
}

#ifndef FAKE_MXSML_NO_V2
mxsml_rc mxSmlGetSingleGpuProcess_v2(unsigned int deviceId, unsigned int *count,
                                     mxSmlProcessInfo_v2_t *rows) {
    return process_list(deviceId, count, rows, 2, "mxSmlGetSingleGpuProcess_v2");
}
#endif

#ifndef FAKE_MXSML_NO_V3
mxsml_rc mxSmlGetSingleGpuProcess_v3(unsigned int deviceId, unsigned int *count,
                                     mxSmlProcessInfo_v3_t *rows) {
    return process_list(deviceId, count, rows, 3, "mxSmlGetSingleGpuProcess_v3");
}
#endif

/* -- sGPU ---------------------------------------------------------------------------------- */

static int sgpu_mode(int d) { return (int)fl_int(0, D "sgpu_toggle", d) == 1; }

/* The scenario position of sGPU `id` on device `d`, or -1; *rc says why there is none. */
static int sgpu_at(int d, unsigned int id, const char *entry, mxsml_rc *rc) {
    const char *fault;
    if (!sgpu_mode(d)) {
        *rc = MXSML_NOT_SUPPORTED; /* sGPU mode off */
        return -1;
    }
    for (int s = 0; s < fl_count(D "sgpus", d); s++) {
        if (fl_int(-1, D "sgpus.%d.id", d, s) != (long long)id)
            continue;
        fault = fl_get(D "sgpus.%d.faults.%s", d, s, entry);
        *rc = fault ? (mxsml_rc)atoi(fault) : MXSML_OK;
        return fault ? -1 : s;
    }
    *rc = MXSML_NOT_SUPPORTED; /* "target sgpu is not exist" */
    return -1;
}

#define SGPU(entry)                                                                               \
    int s;                                                                                        \
    CARD(entry);                                                                                  \
    s = sgpu_at(d, sgpuId, entry, &rc);                                                           \
    if (s < 0)                                                                                    \
        return rc;

mxsml_rc mxSmlGetSgpuToggle(unsigned int deviceId, unsigned int *toggle) {
    CARD("mxSmlGetSgpuToggle");
    if (!toggle)
        return MXSML_INVALID_INPUT;
    if (!fl_get(D "sgpu_toggle", d))
        return MXSML_NOT_SUPPORTED; /* a card without sGPU support */
    *toggle = (unsigned int)fl_int(0, D "sgpu_toggle", d);
    return MXSML_OK;
}

unsigned int mxSmlGetSgpuCount(unsigned int deviceId) {
    mxsml_rc rc;
    int d = card(deviceId, "mxSmlGetSgpuCount", &rc);
    /* 0 when the device is out of range or anything went wrong, as documented. */
    if (d < 0 || !sgpu_mode(d))
        return 0;
    return (unsigned int)fl_count(D "sgpus", d);
}

mxsml_rc mxSmlGetSgpuInfo(unsigned int deviceId, unsigned int sgpuId, mxSmlSgpuInfo_t *info) {
    SGPU("mxSmlGetSgpuInfo");
    if (!info)
        return MXSML_INVALID_INPUT;
    memset(info, 0, sizeof *info);
    info->parentDeviceId = deviceId;
    info->sgpuId = sgpuId;
    info->vramQuota = (unsigned int)fl_int(0, D "sgpus.%d.vram_quota", d, s);
    info->swQueuePriority = 1;
    info->computeQuota = (unsigned int)fl_int(0, D "sgpus.%d.compute_quota", d, s);
    info->minor = (unsigned int)fl_int(sgpuId, D "sgpus.%d.minor", d, s);
    copy_fixed(info->uuid, sizeof info->uuid, fl_str("", D "sgpus.%d.uuid", d, s));
    return MXSML_OK;
}

mxsml_rc mxSmlGetSgpuUsage(unsigned int deviceId, unsigned int sgpuId, int *usage) {
    SGPU("mxSmlGetSgpuUsage");
    if (!usage)
        return MXSML_INVALID_INPUT;
    *usage = (int)fl_int(0, D "sgpus.%d.usage", d, s); /* ten-thousandths */
    return MXSML_OK;
}

mxsml_rc mxSmlGetSgpuMemory(unsigned int deviceId, unsigned int sgpuId,
                            mxSmlSgpuMemoryInfo_t *memory) {
    SGPU("mxSmlGetSgpuMemory");
    if (!memory)
        return MXSML_INVALID_INPUT;
    memory->total = (long)fl_int(0, D "sgpus.%d.memory.total", d, s);
    memory->used = (long)fl_int(0, D "sgpus.%d.memory.used", d, s);
    memory->free = memory->total - memory->used;
    return MXSML_OK;
}

mxsml_rc mxSmlGetSgpuAlias(unsigned int deviceId, unsigned int sgpuId, char *alias,
                           unsigned int *size) {
    SGPU("mxSmlGetSgpuAlias");
    return copy_sized(alias, size, fl_str("", D "sgpus.%d.alias", d, s));
}

#ifndef FAKE_MXSML_NO_ANNOTATIONS
mxsml_rc mxSmlGetSgpuAnnotationsId(unsigned int deviceId, unsigned int sgpuId, char *id,
                                   unsigned int *size) {
    SGPU("mxSmlGetSgpuAnnotationsId");
    return copy_sized(id, size, fl_str("", D "sgpus.%d.annotations_id", d, s));
}
#endif

const char *mxSmlGetErrorString(mxsml_rc rc) {
    switch (rc) {
    case MXSML_OK: return "Success";
    case MXSML_FAILURE: return "Failure";
    case MXSML_NO_DEVICE: return "No device";
    case MXSML_NOT_SUPPORTED: return "Operation not supported";
    case MXSML_SYSFS_ERROR: return "Sysfs error";
    case MXSML_INVALID_DEVICE: return "Invalid device id";
    case MXSML_PERMISSION_DENIED: return "Permission denied";
    case MXSML_INVALID_INPUT: return "Invalid input";
    case MXSML_INSUFFICIENT_SIZE: return "Insufficient size";
    default: return "Unknown error";
    }
}

mxsml_rc mxSmlGetDeviceTopology(unsigned int deviceId1, unsigned int deviceId2,
                                unsigned int *topoInfo) {
    mxsml_rc rc;
    const char *level;
    int a = card(deviceId1, "mxSmlGetDeviceTopology", &rc), b;
    if (a < 0)
        return rc;
    if ((b = card(deviceId2, "mxSmlGetDeviceTopology", &rc)) < 0)
        return rc;
    if (!topoInfo)
        return MXSML_INVALID_INPUT;
    level = fl_get(D "topo.%d", a, b);
    if (!level)
        level = fl_get(D "topo.%d", b, a);
    if (!level)
        return MXSML_NOT_SUPPORTED;
    *topoInfo = (unsigned int)atoi(level);
    return MXSML_OK;
}
