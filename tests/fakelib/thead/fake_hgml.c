/*
 * A fake libhgml.so for tests: the HGML entry points the agent calls through our own ctypes
 * declarations (vendors/_thead_lib.py), compiled against our own hgml.h beside this file.
 * Built and driven by the fake-library kit (tests/fakelib): what it answers comes from the
 * scenario named by $FAKE_HGML_SCENARIO, read at each hgmlInitWithFlags, with the kit's common
 * faults (init code, faults per entry point, hangs, a card lost after k identity reads, a card
 * leaving enumeration). It reproduces what the public notes on HGML describe (the project's
 * reference, vendors.md §7 and §12.3):
 *
 *   - init answering DRIVER_NOT_LOADED (9) where the PPU driver is absent (scenario `init`);
 *   - the NVML probe protocol of the process list (NULL buffer: INSUFFICIENT_SIZE with the
 *     count, SUCCESS when there are none) and of process utilization;
 *   - several samples per PID in one answer (the newest counts), NOT_FOUND when no sample is
 *     newer than asked (idle);
 *   - HGML_VALUE_NOT_AVAILABLE as a process's memory; GI/CI 0xFFFFFFFF with MIG off;
 *   - MIG: up to 8 slots, NOT_FOUND for an empty one; no temperature or power on a MIG handle;
 *     no utilization on a MIG-enabled card;
 *   - GPM: support per card, a sample per GPU instance stamped when taken, the SM activity
 *     between two samples of one instance; a per-metric NOT_READY for samples closer than
 *     100 ms (strictness of the fake: a reader must not ask);
 *   - GPU_IS_LOST from every call on a lost card;
 *   - the card's health figures (issue 29) in NVML's shapes: total ECC errors (NOT_SUPPORTED
 *     with `ecc_off`), energy in mJ, the clocks-event mask under both names, clocks in MHz
 *     (one domain refused by `clock_faults`), the PCIe replay counter; a scenario's all-ones
 *     values are answered as given, as the headers' "not available";
 *   - hgmlDeviceGetTemperatureV, versioned (ARGUMENT_VERSION_MISMATCH for a wrong version);
 *   - links and placement: the card's PCI bus id, ICN links (state, the bus id each reaches,
 *     a PPU or a switch), the common PCIe ancestor of a pair (NOT_SUPPORTED where the scenario
 *     gives none); no NUMA-node call, as in the public header;
 *   - XID events through the event set, each delivered once (a card's `xid`, then its
 *     `xids[]`), an event set refused by the kit's `faults.hgmlEventSetCreate`.
 *
 * Scenario: the NVML-family document of tests/fakelib/nvml_family.py (driver, devices[] of
 * {uuid, name, index, memory, util, temp, power, remapped, retired_pending, mig_mode, gpm,
 * gpm_metrics{<metric id>: value} (a whole card's GPM; any other id INVALID_ARGUMENT), xid, xids[], bus_id, nvlinks[]{state, remote, type, error (a gap: this link answers the code)} (its ICN links), ancestor{<position>: level},
 * ecc{corrected_volatile, …}, ecc_off, energy, throttle, clocks{graphics, sm, memory},
 * clock_faults{…}, pcie_replays, processes[], samples[], migs[]{slot, uuid, gi, memory, sm, gpm_metrics{<id>: value},
 * faults}}) plus the kit's keys.
 */
#include "fakelib.h"
#include "hgml.h"

#define MAX_MIG 8
#define D "devices.%d."

struct hgmlDevice_st {
    int dev;
    int mig; /* the MIG entry's position in migs[]; -1 for the card itself */
};

struct hgmlGpmSample_st {
    fl_gpm_sample_t s;
};

static struct hgmlDevice_st handles[FL_MAX_DEVICES];
static struct hgmlDevice_st mig_handles[FL_MAX_DEVICES][MAX_MIG];
static int initialised;
struct hgmlEventSet_st {
    int unused;
};
static struct hgmlEventSet_st the_event_set;
static int xid_delivered[FL_MAX_DEVICES];

/* The card behind a handle, or -1; sets *rc to what the call must answer first. */
static int card(hgmlDevice_t h, const char *entry, hgmlReturn_t *rc) {
    const char *value;
    int code;
    fl_hang(entry);
    if (!initialised) {
        *rc = HGML_ERROR_UNINITIALIZED;
        return -1;
    }
    if (!h.handle || h.handle->dev < 0 || h.handle->dev >= fl_count("devices")) {
        *rc = HGML_ERROR_INVALID_ARGUMENT;
        return -1;
    }
    if (fl_lost(h.handle->dev)) {
        *rc = HGML_ERROR_GPU_IS_LOST;
        return -1;
    }
    if (h.handle->mig >= 0) {
        value = fl_get(D "migs.%d.faults.%s", h.handle->dev, h.handle->mig, entry);
        code = value ? atoi(value) : 0;
    } else {
        code = fl_fault(entry, h.handle->dev);
    }
    *rc = code ? (hgmlReturn_t)code : HGML_SUCCESS;
    return code ? -1 : h.handle->dev;
}

#define CARD(entry)                                                                               \
    hgmlReturn_t rc;                                                                              \
    int d = card(device, entry, &rc);                                                             \
    if (d < 0)                                                                                    \
        return rc;

static int is_mig(hgmlDevice_t device) { return device.handle->mig >= 0; }

static hgmlReturn_t copy_string(char *out, unsigned int length, const char *value) {
    if (!out)
        return HGML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return HGML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlInitWithFlags(unsigned int flags) {
    int code;
    (void)flags;
    if (fl_load() != 0)
        return HGML_ERROR_DRIVER_NOT_LOADED;
    if ((code = (int)fl_int(0, "init")) != 0)
        return (hgmlReturn_t)code;
    memset(xid_delivered, 0, sizeof xid_delivered);
    for (int i = 0; i < FL_MAX_DEVICES; i++) {
        handles[i].dev = i;
        handles[i].mig = -1;
        for (int m = 0; m < MAX_MIG; m++) {
            mig_handles[i][m].dev = i;
            mig_handles[i][m].mig = m;
        }
    }
    initialised++;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlShutdown(void) {
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    initialised--;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    return copy_string(version, length, fl_str("1.4.1-816bc0", "driver"));
}

hgmlReturn_t hgmlDeviceGetCount_v2(unsigned int *deviceCount) {
    int present[FL_MAX_DEVICES];
    fl_hang("hgmlDeviceGetCount_v2");
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    fl_enumerate();
    *deviceCount = (unsigned int)fl_present_devices(present, FL_MAX_DEVICES);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetHandleByIndex_v2(unsigned int index, hgmlDevice_t *device) {
    int present[FL_MAX_DEVICES], n;
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    n = fl_present_devices(present, FL_MAX_DEVICES);
    if (index >= (unsigned int)n)
        return HGML_ERROR_INVALID_ARGUMENT;
    device->handle = &handles[present[index]];
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetUUID(hgmlDevice_t device, char *uuid, unsigned int length) {
    if (initialised && device.handle && device.handle->mig < 0)
        fl_identity_read(device.handle->dev); /* a card that falls off after `lost_after` */
    CARD("hgmlDeviceGetUUID");
    if (is_mig(device))
        return copy_string(uuid, length, fl_str("", D "migs.%d.uuid", d, device.handle->mig));
    return copy_string(uuid, length, fl_str("", D "uuid", d));
}

hgmlReturn_t hgmlDeviceGetName(hgmlDevice_t device, char *name, unsigned int length) {
    CARD("hgmlDeviceGetName");
    return copy_string(name, length, fl_str("PPU-ZW810E", D "name", d));
}

hgmlReturn_t hgmlDeviceGetIndex(hgmlDevice_t device, unsigned int *index) {
    CARD("hgmlDeviceGetIndex");
    *index = (unsigned int)fl_int(d, D "index", d);
    return HGML_SUCCESS;
}

static void mig_memory(int d, int m, unsigned long long *total, unsigned long long *used) {
    *total = fl_u64(0, D "migs.%d.memory.total", d, m);
    *used = fl_u64(0, D "migs.%d.memory.used", d, m);
}

hgmlReturn_t hgmlDeviceGetMemoryInfo(hgmlDevice_t device, hgmlMemory_t *memory) {
    CARD("hgmlDeviceGetMemoryInfo");
    if (is_mig(device)) {
        mig_memory(d, device.handle->mig, &memory->total, &memory->used);
    } else {
        /* v1 counts the driver's reservation as used. */
        memory->total = fl_u64(0, D "memory.total", d);
        memory->used = fl_u64(0, D "memory.used", d) + fl_u64(0, D "memory.reserved", d);
    }
    memory->free = memory->total - memory->used;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetMemoryInfo_v2(hgmlDevice_t device, hgmlMemory_v2_t *memory) {
    CARD("hgmlDeviceGetMemoryInfo_v2");
    if (memory->version != hgmlMemory_v2)
        return HGML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (is_mig(device)) {
        mig_memory(d, device.handle->mig, &memory->total, &memory->used);
        memory->reserved = 0;
    } else {
        memory->total = fl_u64(0, D "memory.total", d);
        memory->used = fl_u64(0, D "memory.used", d);
        memory->reserved = fl_u64(0, D "memory.reserved", d);
    }
    memory->free = memory->total - memory->used - memory->reserved;
    return HGML_SUCCESS;
}

static int mig_enabled(int d) { return (int)fl_int(0, D "mig_mode.current", d); }

hgmlReturn_t hgmlDeviceGetUtilizationRates(hgmlDevice_t device, hgmlUtilization_t *u) {
    CARD("hgmlDeviceGetUtilizationRates");
    if (mig_enabled(d))
        return HGML_ERROR_NOT_SUPPORTED;
    u->gpu = (unsigned int)fl_int(0, D "util.gpu", d);
    u->memory = (unsigned int)fl_int(0, D "util.memory", d);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetTemperature(hgmlDevice_t device, hgmlTemperatureSensors_t sensorType,
                                      unsigned int *temp) {
    CARD("hgmlDeviceGetTemperature");
    if (is_mig(device))
        return HGML_ERROR_NOT_SUPPORTED; /* MIG devices report no temperature */
    if (sensorType != HGML_TEMPERATURE_GPU)
        return HGML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)fl_int(35, D "temp", d);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetPowerUsage(hgmlDevice_t device, unsigned int *power) {
    CARD("hgmlDeviceGetPowerUsage");
    if (is_mig(device))
        return HGML_ERROR_NOT_SUPPORTED; /* nor power */
    *power = (unsigned int)fl_int(60000, D "power", d);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetTemperatureV(hgmlDevice_t device, hgmlTemperature_v1_t *temperature) {
    CARD("hgmlDeviceGetTemperatureV");
    if (is_mig(device))
        return HGML_ERROR_NOT_SUPPORTED;
    if (!temperature)
        return HGML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != hgmlTemperature_v1)
        return HGML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != HGML_TEMPERATURE_GPU)
        return HGML_ERROR_INVALID_ARGUMENT;
    temperature->temperature = (int)fl_int(35, D "temp", d);
    return HGML_SUCCESS;
}

/* -- the card's error counters, energy, clocks and PCIe replays (issue 29) ------------------ */

hgmlReturn_t hgmlDeviceGetTotalEccErrors(hgmlDevice_t device, hgmlMemoryErrorType_t errorType,
                                         hgmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts) {
    static const char *const kinds[2][2] = {{"corrected_volatile", "corrected_aggregate"},
                                            {"uncorrected_volatile", "uncorrected_aggregate"}};
    CARD("hgmlDeviceGetTotalEccErrors");
    if (!eccCounts || (unsigned)errorType >= HGML_MEMORY_ERROR_TYPE_COUNT ||
        (unsigned)counterType >= HGML_ECC_COUNTER_TYPE_COUNT)
        return HGML_ERROR_INVALID_ARGUMENT;
    if (fl_int(0, D "ecc_off", d))
        return HGML_ERROR_NOT_SUPPORTED; /* ECC mode disabled */
    *eccCounts = fl_u64(0, D "ecc.%s", d, kinds[errorType][counterType]);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetTotalEnergyConsumption(hgmlDevice_t device, unsigned long long *energy) {
    CARD("hgmlDeviceGetTotalEnergyConsumption");
    if (!energy)
        return HGML_ERROR_INVALID_ARGUMENT;
    *energy = fl_u64(0, D "energy", d); /* mJ since the driver loaded */
    return HGML_SUCCESS;
}

static hgmlReturn_t clocks_event_reasons(hgmlDevice_t device, const char *entry,
                                         unsigned long long *reasons) {
    CARD(entry);
    if (!reasons)
        return HGML_ERROR_INVALID_ARGUMENT;
    *reasons = fl_u64(0, D "throttle", d); /* the hgmlClocksEventReason* bits */
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetCurrentClocksEventReasons(hgmlDevice_t device,
                                                    unsigned long long *reasons) {
    return clocks_event_reasons(device, "hgmlDeviceGetCurrentClocksEventReasons", reasons);
}

hgmlReturn_t hgmlDeviceGetCurrentClocksThrottleReasons(hgmlDevice_t device,
                                                       unsigned long long *reasons) {
    return clocks_event_reasons(device, "hgmlDeviceGetCurrentClocksThrottleReasons", reasons);
}

hgmlReturn_t hgmlDeviceGetClockInfo(hgmlDevice_t device, hgmlClockType_t type,
                                    unsigned int *clock) {
    static const char *const names[] = {"graphics", "sm", "memory", "video"};
    static const long long defaults[] = {1500, 1500, 1600, 1200}; /* MHz, assumed for a PPU */
    const char *fault;
    CARD("hgmlDeviceGetClockInfo");
    if (!clock || (unsigned)type >= HGML_CLOCK_COUNT)
        return HGML_ERROR_INVALID_ARGUMENT;
    if ((fault = fl_get(D "clock_faults.%s", d, names[type])) != NULL)
        return (hgmlReturn_t)atoi(fault); /* one clock domain not served */
    *clock = (unsigned int)fl_u64((unsigned long long)defaults[type], D "clocks.%s", d, names[type]);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetPcieReplayCounter(hgmlDevice_t device, unsigned int *value) {
    CARD("hgmlDeviceGetPcieReplayCounter");
    if (!value)
        return HGML_ERROR_INVALID_ARGUMENT;
    *value = (unsigned int)fl_u64(0, D "pcie_replays", d);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetRemappedRows(hgmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    CARD("hgmlDeviceGetRemappedRows");
    *corrRows = (unsigned int)fl_int(0, D "remapped.corr", d);
    *uncRows = (unsigned int)fl_int(0, D "remapped.unc", d);
    *isPending = (unsigned int)fl_int(0, D "remapped.pending", d);
    *failureOccurred = (unsigned int)fl_int(0, D "remapped.failure", d);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetRetiredPagesPendingStatus(hgmlDevice_t device,
                                                    hgmlEnableState_t *isPending) {
    CARD("hgmlDeviceGetRetiredPagesPendingStatus");
    *isPending = fl_int(0, D "retired_pending", d) ? HGML_FEATURE_ENABLED : HGML_FEATURE_DISABLED;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetMigMode(hgmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    CARD("hgmlDeviceGetMigMode");
    *currentMode = (unsigned int)mig_enabled(d);
    *pendingMode = (unsigned int)fl_int(0, D "mig_mode.pending", d);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetMaxMigDeviceCount(hgmlDevice_t device, unsigned int *count) {
    CARD("hgmlDeviceGetMaxMigDeviceCount");
    *count = mig_enabled(d) ? MAX_MIG : 0;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetMigDeviceHandleByIndex(hgmlDevice_t device, unsigned int index,
                                                 hgmlDevice_t *migDevice) {
    CARD("hgmlDeviceGetMigDeviceHandleByIndex");
    if (!mig_enabled(d))
        return HGML_ERROR_NOT_SUPPORTED;
    for (int m = 0; m < fl_count(D "migs", d) && m < MAX_MIG; m++) {
        if (fl_int(-1, D "migs.%d.slot", d, m) == (long long)index) {
            migDevice->handle = &mig_handles[d][m];
            return HGML_SUCCESS;
        }
    }
    return HGML_ERROR_NOT_FOUND; /* an empty slot */
}

hgmlReturn_t hgmlDeviceGetGpuInstanceId(hgmlDevice_t device, unsigned int *id) {
    CARD("hgmlDeviceGetGpuInstanceId");
    if (!is_mig(device))
        return HGML_ERROR_NOT_SUPPORTED;
    *id = (unsigned int)fl_int(0, D "migs.%d.gi", d, device.handle->mig);
    return HGML_SUCCESS;
}

static void process_row(int d, int i, hgmlProcessInfo_t *p) {
    const char *memory = fl_str("0", D "processes.%d.memory", d, i);
    p->pid = (unsigned int)fl_int(0, D "processes.%d.pid", d, i);
    p->usedGpuMemory = strcmp(memory, "na") ? strtoull(memory, NULL, 10)
                                            : (unsigned long long)HGML_VALUE_NOT_AVAILABLE;
    p->gpuInstanceId = (unsigned int)fl_u64(0xFFFFFFFFu, D "processes.%d.gi", d, i);
    p->computeInstanceId = (unsigned int)fl_u64(0xFFFFFFFFu, D "processes.%d.ci", d, i);
}

hgmlReturn_t hgmlDeviceGetComputeRunningProcesses_v3(hgmlDevice_t device, unsigned int *infoCount,
                                                     hgmlProcessInfo_t *infos) {
    unsigned int listed, count;
    CARD("hgmlDeviceGetComputeRunningProcesses_v3");
    listed = (unsigned int)fl_count(D "processes", d);
    count = listed + (unsigned int)fl_extra_rows(d, infos != NULL, (int)listed,
                                                 infos ? (int)*infoCount : 0);
    if (!infos || *infoCount < count) {
        *infoCount = count;
        return count == 0 ? HGML_SUCCESS : HGML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < count; i++) {
        if (i < listed) {
            process_row(d, (int)i, &infos[i]);
        } else { /* a process that started after the probe */
            infos[i].pid = 900000 + i;
            infos[i].usedGpuMemory = 1048576ULL;
            infos[i].gpuInstanceId = 0xFFFFFFFFu;
            infos[i].computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *infoCount = count;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetProcessUtilization(hgmlDevice_t device,
                                             hgmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
    unsigned int n = 0, j = 0;
    int total;
    CARD("hgmlDeviceGetProcessUtilization");
    if (mig_enabled(d))
        return HGML_ERROR_NOT_SUPPORTED;
    total = fl_count(D "samples", d);
    for (int i = 0; i < total; i++)
        if (fl_u64(0, D "samples.%d.ts", d, i) > lastSeenTimeStamp)
            n++;
    if (n == 0)
        return HGML_ERROR_NOT_FOUND; /* nothing ran in the window: idle, not a failure */
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return HGML_ERROR_INSUFFICIENT_SIZE;
    }
    /* Several rows may name one PID, with different time stamps: returned as recorded. */
    for (int i = 0; i < total; i++) {
        hgmlProcessUtilizationSample_t *s = &utilization[j];
        if (fl_u64(0, D "samples.%d.ts", d, i) <= lastSeenTimeStamp)
            continue;
        memset(s, 0, sizeof *s);
        s->pid = (unsigned int)fl_int(0, D "samples.%d.pid", d, i);
        s->timeStamp = fl_u64(0, D "samples.%d.ts", d, i);
        s->smUtil = (unsigned int)fl_int(0, D "samples.%d.sm", d, i);
        s->memUtil = (unsigned int)fl_int(0, D "samples.%d.mem", d, i);
        j++;
    }
    *processSamplesCount = n;
    return HGML_SUCCESS;
}

/* -- GPM ----------------------------------------------------------------------------------- */

/* How many GPM samples are allocated and not yet freed: for tests, never called by HGML users. */
int fake_gpm_live_samples(void) { return fl_gpm_live; }

/* How many GPM samples were taken since the library was loaded: for tests as well. */
int fake_gpm_samples_taken(void) { return fl_gpm_taken; }

hgmlReturn_t hgmlGpmQueryDeviceSupport(hgmlDevice_t device, hgmlGpmSupport_t *gpmSupport) {
    CARD("hgmlGpmQueryDeviceSupport");
    if (!gpmSupport)
        return HGML_ERROR_INVALID_ARGUMENT;
    /* The struct version this driver accepts: the header's by default, 1 where the scenario
     * says the driver is the one GPUStack's binding was written against. */
    if (gpmSupport->version != (unsigned int)fl_int(HGML_GPM_SUPPORT_VERSION, "gpm_support_version"))
        return HGML_ERROR_ARGUMENT_VERSION_MISMATCH;
    gpmSupport->isSupportedDevice = (unsigned int)fl_int(0, D "gpm", d);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlGpmSampleAlloc(hgmlGpmSample_t *gpmSample) {
    int code;
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    if ((code = fl_fault("hgmlGpmSampleAlloc", -1)) != 0)
        return (hgmlReturn_t)code;
    if (!gpmSample)
        return HGML_ERROR_INVALID_ARGUMENT;
    gpmSample->handle = (struct hgmlGpmSample_st *)fl_gpm_alloc();
    return gpmSample->handle ? HGML_SUCCESS : HGML_ERROR_MEMORY;
}

hgmlReturn_t hgmlGpmSampleFree(hgmlGpmSample_t gpmSample) {
    return gpmSample.handle && fl_gpm_free(&gpmSample.handle->s) == 0
               ? HGML_SUCCESS
               : HGML_ERROR_INVALID_ARGUMENT;
}

hgmlReturn_t hgmlGpmMigSampleGet(hgmlDevice_t device, unsigned int gpuInstanceId,
                                 hgmlGpmSample_t gpmSample) {
    const char *fault;
    int m;
    CARD("hgmlGpmMigSampleGet");
    if (is_mig(device) || !gpmSample.handle || !fl_gpm_valid(&gpmSample.handle->s))
        return HGML_ERROR_INVALID_ARGUMENT; /* the parent card's handle and a live sample */
    if (!fl_int(0, D "gpm", d) || !mig_enabled(d))
        return HGML_ERROR_NOT_SUPPORTED;
    if ((m = fl_mig_of_instance(d, gpuInstanceId)) < 0)
        return HGML_ERROR_NOT_FOUND; /* no such GPU instance (destroyed) */
    if ((fault = fl_get(D "migs.%d.faults.hgmlGpmMigSampleGet", d, m)) != NULL)
        return (hgmlReturn_t)atoi(fault);
    fl_gpm_take(&gpmSample.handle->s, d, gpuInstanceId);
    return HGML_SUCCESS;
}

/* A whole card's sample (issue 41): GPU instance -1 in the kit's sample. */
hgmlReturn_t hgmlGpmSampleGet(hgmlDevice_t device, hgmlGpmSample_t gpmSample) {
    CARD("hgmlGpmSampleGet");
    if (is_mig(device) || !gpmSample.handle || !fl_gpm_valid(&gpmSample.handle->s))
        return HGML_ERROR_INVALID_ARGUMENT;
    if (!fl_int(0, D "gpm", d))
        return HGML_ERROR_NOT_SUPPORTED; /* before Hopper */
    fl_gpm_take(&gpmSample.handle->s, d, -1);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlGpmMetricsGet(hgmlGpmMetricsGet_t *metricsGet) {
    const fl_gpm_sample_t *a, *b;
    int m;
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    fl_hang("hgmlGpmMetricsGet");
    if ((m = fl_fault("hgmlGpmMetricsGet", -1)) != 0)
        return (hgmlReturn_t)m;
    if (!metricsGet || metricsGet->numMetrics > HGML_GPM_METRIC_MAX)
        return HGML_ERROR_INVALID_ARGUMENT;
    if (metricsGet->version != HGML_GPM_METRICS_GET_VERSION)
        return HGML_ERROR_ARGUMENT_VERSION_MISMATCH;
    a = metricsGet->sample1.handle ? &metricsGet->sample1.handle->s : NULL;
    b = metricsGet->sample2.handle ? &metricsGet->sample2.handle->s : NULL;
    if (!fl_gpm_valid(a) || !fl_gpm_valid(b) || a->dev < 0 || a->dev != b->dev || a->gi != b->gi ||
        b->at <= a->at)
        return HGML_ERROR_INVALID_ARGUMENT; /* two samples of one instance, in order */
    m = fl_mig_of_instance(a->dev, a->gi);
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        hgmlGpmMetric_t *metric = &metricsGet->metrics[i];
        memset(&metric->metricInfo, 0, sizeof metric->metricInfo);
        metric->value = 0;
        if (a->gi < 0) {
            /* A whole card: the metric ids the scenario's gpm_metrics serves; any other id
             * answers INVALID_ARGUMENT, as a real driver answers an id it does not know. */
            const char *value = fl_get(D "gpm_metrics.%u", a->dev, metric->metricId);
            if (!value)
                metric->hgmlReturn = HGML_ERROR_INVALID_ARGUMENT;
            else if (b->at - a->at < FL_GPM_MIN_INTERVAL)
                metric->hgmlReturn = HGML_ERROR_NOT_READY;
            else {
                metric->hgmlReturn = HGML_SUCCESS;
                metric->value = strtod(value, NULL);
            }
        } else {
            /* A GPU instance: the ids its migs[].gpm_metrics serves (issue 41), and SM
             * activity from its `sm`; any other id NOT_SUPPORTED, what an instance answers
             * for a figure it cannot state. */
            const char *value =
                m < 0 ? NULL : fl_get("devices.%d.migs.%d.gpm_metrics.%u", a->dev, m, metric->metricId);
            if (m < 0 || (!value && metric->metricId != HGML_GPM_METRIC_SM_UTIL))
                metric->hgmlReturn = HGML_ERROR_NOT_SUPPORTED;
            else if (b->at - a->at < FL_GPM_MIN_INTERVAL)
                metric->hgmlReturn = HGML_ERROR_NOT_READY;
            else {
                metric->hgmlReturn = HGML_SUCCESS;
                metric->value = value ? strtod(value, NULL)
                                      : fl_double(0, "devices.%d.migs.%d.sm", a->dev, m);
            }
        }
    }
    return HGML_SUCCESS;
}

/* -- XID events (issue 29) ------------------------------------------------------------------ */

hgmlReturn_t hgmlEventSetCreate(hgmlEventSet_t *set) {
    int code;
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    if ((code = fl_fault("hgmlEventSetCreate", -1)) != 0)
        return (hgmlReturn_t)code;
    *set = &the_event_set;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceRegisterEvents(hgmlDevice_t device, unsigned long long eventTypes,
                                      hgmlEventSet_t set) {
    CARD("hgmlDeviceRegisterEvents");
    (void)d;
    if (set != &the_event_set || eventTypes != (unsigned long long)hgmlEventTypeXidCriticalError)
        return HGML_ERROR_INVALID_ARGUMENT; /* strictness of the fake: XIDs are all we ask */
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlEventSetWait_v2(hgmlEventSet_t set, hgmlEventData_t *data,
                                 unsigned int timeoutms) {
    (void)timeoutms;
    if (!initialised)
        return HGML_ERROR_UNINITIALIZED;
    if (set != &the_event_set || !data)
        return HGML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < fl_count("devices") && i < FL_MAX_DEVICES; i++) {
        /* xid_delivered[i]: how many of the card's XIDs went out: `xid` first, then xids[]. */
        int single = fl_int(0, D "xid", i) != 0;
        int queued = single + fl_count(D "xids", i);
        if (xid_delivered[i] < queued) {
            int k = xid_delivered[i]++;
            long long xid = single && k == 0 ? fl_int(0, D "xid", i)
                                             : fl_int(0, D "xids.%d", i, k - single);
            memset(data, 0, sizeof *data);
            data->device.handle = &handles[i];
            data->eventType = (unsigned long long)hgmlEventTypeXidCriticalError;
            data->eventData = (unsigned long long)xid;
            data->gpuInstanceId = 0xFFFFFFFFu;
            data->computeInstanceId = 0xFFFFFFFFu;
            return HGML_SUCCESS;
        }
    }
    return HGML_ERROR_TIMEOUT;
}

hgmlReturn_t hgmlEventSetFree(hgmlEventSet_t set) {
    if (set != &the_event_set)
        return HGML_ERROR_INVALID_ARGUMENT;
    return HGML_SUCCESS;
}

/* -- links and placement (R-X3) -------------------------------------------------------------- */

#define MAX_ICNLINKS 36

static void fill_pci(hgmlPciInfo_t *pci, const char *bus) {
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", strlen(bus) > 4 ? bus + 4 : bus);
}

hgmlReturn_t hgmlDeviceGetPciInfo_v3(hgmlDevice_t device, hgmlPciInfo_t *pci) {
    char bus[HGML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    const char *given;
    CARD("hgmlDeviceGetPciInfo_v3");
    if (!pci)
        return HGML_ERROR_INVALID_ARGUMENT;
    given = fl_get(D "bus_id", d);
    if (given)
        snprintf(bus, sizeof bus, "%s", given);
    else
        snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0x10 + d);
    fill_pci(pci, bus);
    pci->globalPpuId = (unsigned int)d;
    return HGML_SUCCESS;
}

static hgmlReturn_t icnlink(hgmlDevice_t device, const char *entry, unsigned int link, int *d) {
    hgmlReturn_t rc;
    int n;
    *d = card(device, entry, &rc);
    if (*d < 0)
        return rc;
    n = fl_count(D "nvlinks", *d);
    if (n == 0)
        return HGML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)n || link >= MAX_ICNLINKS)
        return HGML_ERROR_INVALID_ARGUMENT;
    /* a gap: this one link answers an error (nvlinks[].error), the others as they are */
    if (fl_int(0, D "nvlinks.%u.error", *d, link))
        return (hgmlReturn_t)fl_int(0, D "nvlinks.%u.error", *d, link);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetIcnLinkState(hgmlDevice_t device, unsigned int link,
                                       hgmlEnableState_t *isActive) {
    int d;
    hgmlReturn_t rc = icnlink(device, "hgmlDeviceGetIcnLinkState", link, &d);
    if (rc != HGML_SUCCESS)
        return rc;
    if (!isActive)
        return HGML_ERROR_INVALID_ARGUMENT;
    *isActive = fl_int(0, D "nvlinks.%u.state", d, link) ? HGML_FEATURE_ENABLED : HGML_FEATURE_DISABLED;
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetIcnLinkRemotePciInfo_v2(hgmlDevice_t device, unsigned int link,
                                                  hgmlPciInfo_t *pci) {
    int d;
    hgmlReturn_t rc = icnlink(device, "hgmlDeviceGetIcnLinkRemotePciInfo_v2", link, &d);
    if (rc != HGML_SUCCESS)
        return rc;
    if (!pci)
        return HGML_ERROR_INVALID_ARGUMENT;
    fill_pci(pci, fl_str("", D "nvlinks.%u.remote", d, link));
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetIcnLinkRemoteDeviceType(hgmlDevice_t device, unsigned int link,
                                                  hgmlIntIcnLinkDeviceType_t *type) {
    int d;
    hgmlReturn_t rc = icnlink(device, "hgmlDeviceGetIcnLinkRemoteDeviceType", link, &d);
    if (rc != HGML_SUCCESS)
        return rc;
    if (!type)
        return HGML_ERROR_INVALID_ARGUMENT;
    *type = (hgmlIntIcnLinkDeviceType_t)fl_int(0, D "nvlinks.%u.type", d, link);
    return HGML_SUCCESS;
}

hgmlReturn_t hgmlDeviceGetTopologyCommonAncestor(hgmlDevice_t device1, hgmlDevice_t device2,
                                                 hgmlGpuTopologyLevel_t *pathInfo) {
    const char *level;
    hgmlReturn_t rc;
    int a = card(device1, "hgmlDeviceGetTopologyCommonAncestor", &rc), b;
    if (a < 0)
        return rc;
    if ((b = card(device2, "hgmlDeviceGetTopologyCommonAncestor", &rc)) < 0)
        return rc;
    if (!pathInfo)
        return HGML_ERROR_INVALID_ARGUMENT;
    level = fl_get("devices.%d.ancestor.%d", a, b);
    if (!level)
        level = fl_get("devices.%d.ancestor.%d", b, a);
    if (!level)
        return HGML_ERROR_NOT_SUPPORTED;
    *pathInfo = (hgmlGpuTopologyLevel_t)atoi(level);
    return HGML_SUCCESS;
}
