/*
 * A fake libnvidia-ml.so.1 for tests: the NVML entry points the agent calls through pynvml,
 * compiled against NVIDIA's own nvml.h (PyPI nvidia-nvml-dev, installed at test time) so every
 * signature and struct layout is the real one. Built and driven by the fake-library kit
 * (tests/fakelib): what it answers comes from the scenario named by $FAKE_NVML_SCENARIO, read
 * at each nvmlInit, with the kit's common faults (init code, faults per entry point, hangs, a
 * card lost after k identity reads, a card leaving enumeration). It reproduces the driver
 * behaviours the agent depends on (the project's reference notes on NVML, §2.3):
 *
 *   - the process-list probe: NULL buffer -> INSUFFICIENT_SIZE with the count, SUCCESS when
 *     there are none; a list that grows between the probe and the read;
 *   - NVML_VALUE_NOT_AVAILABLE as a process's memory; GI/CI 0xFFFFFFFF with MIG off;
 *   - NOT_FOUND from the process-utilization call when no sample is newer than asked;
 *   - NOT_SUPPORTED for utilization on a MIG-enabled card; NOT_FOUND for an empty MIG slot;
 *   - version checks on versioned structs (ARGUMENT_VERSION_MISMATCH);
 *   - GPU_IS_LOST from every call on a lost card; each XID delivered once through the event set
 *     (a card's `xid`, then its `xids[]` in order), an event set the driver refuses (the
 *     kit's `faults.nvmlEventSetCreate`);
 *   - GPM (Hopper and newer): support per card, a sample per GPU instance or whole card stamped
 *     when taken, a whole card's metrics by id from the scenario (INVALID_ARGUMENT per id it
 *     does not serve, NOT_SUPPORTED from the card's sample before Hopper),
 *     the SM activity between two samples of one instance, a per-metric NOT_READY for samples
 *     closer than the header's 100 ms (strictness of the fake: a reader must not ask).
 *
 * Like fake_dmi_mig.c (Hygon's library under NVML's names), it refuses a handle it did not
 * hand out (INVALID_ARGUMENT), and nvmlDeviceGetMemoryInfo_v2 answers through this library's
 * own exported v1 nvmlDeviceGetMemoryInfo, a call through the PLT: where libhydmi_mig sits in
 * the global namespace before this library is loaded, that call binds to Hygon's, which
 * refuses this handle (tests/vendors/test_hygon_fake.py).
 *
 * Scenario (JSON, see tests/fakelib/nvidia/__init__.py): driver, devices[] of {uuid, name,
 * index, memory{total, used, reserved} (bytes), util{gpu, memory}, temp, power (mW),
 * remapped{corr, unc, pending, failure}, retired_pending, mig_mode{current, pending}, xid, xids[],
 * processes[]{pid, memory (bytes or "na"), gi, ci}, samples[]{pid, ts, sm, mem},
 * migs[]{slot, uuid, gi, memory{total, used}, sm (GPM SM activity, %), gpm_metrics{<id>: value}
 * (the GPU instance's other GPM ids; any other NOT_SUPPORTED), faults{}}, gpm (1: GPM
 * served), gpm_metrics{<NVML_GPM_METRIC_* id>: value} (a whole card's GPM metrics; any other
 * id answers INVALID_ARGUMENT), ecc{corrected_volatile, uncorrected_volatile, corrected_aggregate,
 * uncorrected_aggregate}, ecc_off (1: ECC answers NOT_SUPPORTED), energy (mJ), throttle (the
 * clocks-event-reason mask), clocks{graphics, sm, memory} (MHz), clock_faults{domain: code},
 * pcie_replays, bus_id (default 00000000:<0x10 + position>:00.0), gpu_numa (what
 * nvmlDeviceGetNumaNodeId answers: the GPU memory's own NUMA node on a coherent platform such as
 * GH200; absent or -1: NOT_SUPPORTED, as the x86 H200 recorded in 2026-12 answered), numa (the
 * node the card is attached to: not read here, the tests write it into a sysfs tree,
 * tests/fakelib/nvml_family.py's write_sysfs), nvlinks[]{state, remote (bus id), type (0 GPU, 2
 * NVSwitch), error (this link answers the code: a gap)}, ancestor{<other card's position>: nvmlGpuTopologyLevel_t}} plus the kit's fault
 * keys. A card without nvlinks answers NOT_SUPPORTED for link 0, one with n links
 * INVALID_ARGUMENT past them; a pair without an ancestor in either card answers NOT_SUPPORTED.
 */
#include <stdint.h>

#include "fakelib.h"
#include "nvml.h"

#define MAX_MIG 8
#define D "devices.%d."

struct nvmlDevice_st {
    int dev;
    int mig; /* the MIG entry's position in migs[]; -1 for the card itself */
};

struct nvmlEventSet_st {
    int unused;
};

struct nvmlGpmSample_st {
    fl_gpm_sample_t s;
};

static struct nvmlDevice_st handles[FL_MAX_DEVICES];
static struct nvmlDevice_st mig_handles[FL_MAX_DEVICES][MAX_MIG];
static int xid_delivered[FL_MAX_DEVICES];
static int initialised;
static struct nvmlEventSet_st the_event_set;

/* Whether `h` is a handle this library handed out. */
static int ours(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h;
    return (p >= (uintptr_t)handles && p < (uintptr_t)(handles + FL_MAX_DEVICES)) ||
           (p >= (uintptr_t)mig_handles && p < (uintptr_t)mig_handles + sizeof mig_handles);
}

/* The card behind a handle, or -1; sets *rc to what the call must answer first. */
static int card(nvmlDevice_t h, const char *entry, nvmlReturn_t *rc) {
    int code;
    fl_hang(entry);
    if (!initialised) {
        *rc = NVML_ERROR_UNINITIALIZED;
        return -1;
    }
    if (!ours(h) || h->dev < 0 || h->dev >= fl_count("devices")) {
        *rc = NVML_ERROR_INVALID_ARGUMENT;
        return -1;
    }
    if (fl_lost(h->dev)) {
        *rc = NVML_ERROR_GPU_IS_LOST;
        return -1;
    }
    if (h->mig >= 0) {
        const char *value = fl_get(D "migs.%d.faults.%s", h->dev, h->mig, entry);
        code = value ? atoi(value) : 0;
    } else {
        code = fl_fault(entry, h->dev);
    }
    *rc = code ? (nvmlReturn_t)code : NVML_SUCCESS;
    return code ? -1 : h->dev;
}

#define CARD(entry)                                                                               \
    nvmlReturn_t rc;                                                                              \
    int d = card(device, entry, &rc);                                                             \
    if (d < 0)                                                                                    \
        return rc;

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value) {
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags) {
    int code;
    (void)flags;
    if (fl_load() != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if ((code = (int)fl_int(0, "init")) != 0)
        return (nvmlReturn_t)code;
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
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t DECLDIR nvmlShutdown(void) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}

const DECLDIR char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, fl_str("550.90.07", "driver"));
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *count) {
    int present[FL_MAX_DEVICES];
    fl_hang("nvmlDeviceGetCount_v2");
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    fl_enumerate();
    *count = (unsigned int)fl_present_devices(present, FL_MAX_DEVICES);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    int present[FL_MAX_DEVICES], n;
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    n = fl_present_devices(present, FL_MAX_DEVICES);
    if (index >= (unsigned int)n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[present[index]];
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (initialised && device && device->mig < 0)
        fl_identity_read(device->dev); /* a card that falls off after `lost_after` of these */
    CARD("nvmlDeviceGetUUID");
    if (device->mig >= 0)
        return copy_string(uuid, length, fl_str("", D "migs.%d.uuid", d, device->mig));
    return copy_string(uuid, length, fl_str("", D "uuid", d));
}

nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    CARD("nvmlDeviceGetName");
    return copy_string(name, length, fl_str("", D "name", d));
}

nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    CARD("nvmlDeviceGetIndex");
    *index = (unsigned int)fl_int(d, D "index", d);
    return NVML_SUCCESS;
}

static void mig_memory(int d, int m, unsigned long long *total, unsigned long long *used) {
    *total = fl_u64(0, D "migs.%d.memory.total", d, m);
    *used = fl_u64(0, D "migs.%d.memory.used", d, m);
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    CARD("nvmlDeviceGetMemoryInfo");
    if (device->mig >= 0) {
        mig_memory(d, device->mig, &memory->total, &memory->used);
    } else {
        /* v1 counts the driver's reservation as used. */
        memory->total = fl_u64(0, D "memory.total", d);
        memory->used = fl_u64(0, D "memory.used", d) + fl_u64(0, D "memory.reserved", d);
    }
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlMemory_t v1;
    CARD("nvmlDeviceGetMemoryInfo_v2");
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    /* v2 is v1 with the driver's reservation taken out of used, asked of the exported v1. */
    if ((rc = nvmlDeviceGetMemoryInfo(device, &v1)) != NVML_SUCCESS)
        return rc;
    memory->reserved = device->mig >= 0 ? 0 : fl_u64(0, D "memory.reserved", d);
    memory->total = v1.total;
    memory->used = v1.used - memory->reserved;
    memory->free = memory->total - memory->used - memory->reserved;
    return NVML_SUCCESS;
}

static int mig_enabled(int d) { return (int)fl_int(0, D "mig_mode.current", d); }

nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    CARD("nvmlDeviceGetUtilizationRates");
    if (mig_enabled(d))
        return NVML_ERROR_NOT_SUPPORTED; /* no utilization on a MIG-enabled card */
    u->gpu = (unsigned int)fl_int(0, D "util.gpu", d);
    u->memory = (unsigned int)fl_int(0, D "util.memory", d);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTemperature(nvmlDevice_t device,
                                              nvmlTemperatureSensors_t sensorType,
                                              unsigned int *temp) {
    CARD("nvmlDeviceGetTemperature");
    if (sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)fl_int(40, D "temp", d);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    CARD("nvmlDeviceGetPowerUsage");
    *power = (unsigned int)fl_int(100000, D "power", d);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                               unsigned int *uncRows, unsigned int *isPending,
                                               unsigned int *failureOccurred) {
    CARD("nvmlDeviceGetRemappedRows");
    *corrRows = (unsigned int)fl_int(0, D "remapped.corr", d);
    *uncRows = (unsigned int)fl_int(0, D "remapped.unc", d);
    *isPending = (unsigned int)fl_int(0, D "remapped.pending", d);
    *failureOccurred = (unsigned int)fl_int(0, D "remapped.failure", d);
    return NVML_SUCCESS;
}

/* -- the card's error counters, energy, clocks and PCIe replays (issue 29) ------------------ */

nvmlReturn_t DECLDIR nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                 nvmlMemoryErrorType_t errorType,
                                                 nvmlEccCounterType_t counterType,
                                                 unsigned long long *eccCounts) {
    static const char *const kinds[2][2] = {{"corrected_volatile", "corrected_aggregate"},
                                            {"uncorrected_volatile", "uncorrected_aggregate"}};
    CARD("nvmlDeviceGetTotalEccErrors");
    if (!eccCounts || (unsigned)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        (unsigned)counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (fl_int(0, D "ecc_off", d))
        return NVML_ERROR_NOT_SUPPORTED; /* ECC mode disabled, or a card without ECC memory */
    *eccCounts = fl_u64(0, D "ecc.%s", d, kinds[errorType][counterType]);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                         unsigned long long *energy) {
    CARD("nvmlDeviceGetTotalEnergyConsumption");
    if (!energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    *energy = fl_u64(0, D "energy", d); /* mJ since the driver loaded */
    return NVML_SUCCESS;
}

static nvmlReturn_t clocks_event_reasons(nvmlDevice_t device, const char *entry,
                                         unsigned long long *reasons) {
    CARD(entry);
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = fl_u64(0, D "throttle", d); /* the nvmlClocksEventReason* bits */
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                            unsigned long long *reasons) {
    return clocks_event_reasons(device, "nvmlDeviceGetCurrentClocksEventReasons", reasons);
}

nvmlReturn_t DECLDIR nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                               unsigned long long *reasons) {
    return clocks_event_reasons(device, "nvmlDeviceGetCurrentClocksThrottleReasons", reasons);
}

nvmlReturn_t DECLDIR nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                            unsigned int *clock) {
    static const char *const names[] = {"graphics", "sm", "memory", "video"};
    static const long long defaults[] = {1980, 1980, 2619, 1545}; /* MHz, an H100 SXM's */
    const char *fault;
    CARD("nvmlDeviceGetClockInfo");
    if (!clock || (unsigned)type >= NVML_CLOCK_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((fault = fl_get(D "clock_faults.%s", d, names[type])) != NULL)
        return (nvmlReturn_t)atoi(fault); /* one clock domain not served */
    *clock = (unsigned int)fl_u64((unsigned long long)defaults[type], D "clocks.%s", d, names[type]);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    CARD("nvmlDeviceGetPcieReplayCounter");
    if (!value)
        return NVML_ERROR_INVALID_ARGUMENT;
    *value = (unsigned int)fl_u64(0, D "pcie_replays", d);
    return NVML_SUCCESS;
}

/* -- links and placement (R-X3) -------------------------------------------------------------- */

static void card_bus_id(int d, char *out, size_t size) {
    const char *bus = fl_get(D "bus_id", d);
    if (bus)
        snprintf(out, size, "%s", bus);
    else
        snprintf(out, size, "00000000:%02X:00.0", 0x10 + d);
}

static void fill_pci(nvmlPciInfo_t *pci, const char *bus) {
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", bus);
    /* the legacy spelling: a 4-digit domain */
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", strlen(bus) > 4 ? bus + 4 : bus);
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    CARD("nvmlDeviceGetPciInfo_v3");
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    card_bus_id(d, bus, sizeof bus);
    fill_pci(pci, bus);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    long long value;
    CARD("nvmlDeviceGetNumaNodeId");
    if (!node)
        return NVML_ERROR_INVALID_ARGUMENT;
    value = fl_int(-1, D "gpu_numa", d);
    if (value < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)value;
    return NVML_SUCCESS;
}

static nvmlReturn_t nvlink(nvmlDevice_t device, const char *entry, unsigned int link, int *d) {
    nvmlReturn_t rc;
    int n;
    *d = card(device, entry, &rc);
    if (*d < 0)
        return rc;
    n = fl_count(D "nvlinks", *d);
    if (n == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)n || link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* a gap: this one link answers an error (nvlinks[].error), the others as they are */
    if (fl_int(0, D "nvlinks.%u.error", *d, link))
        return (nvmlReturn_t)fl_int(0, D "nvlinks.%u.error", *d, link);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                              nvmlEnableState_t *isActive) {
    int d;
    nvmlReturn_t rc = nvlink(device, "nvmlDeviceGetNvLinkState", link, &d);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!isActive)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = fl_int(0, D "nvlinks.%u.state", d, link) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                         nvmlPciInfo_t *pci) {
    int d;
    nvmlReturn_t rc = nvlink(device, "nvmlDeviceGetNvLinkRemotePciInfo_v2", link, &d);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(pci, fl_str("", D "nvlinks.%u.remote", d, link));
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                         nvmlIntNvLinkDeviceType_t *type) {
    int d;
    nvmlReturn_t rc = nvlink(device, "nvmlDeviceGetNvLinkRemoteDeviceType", link, &d);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!type)
        return NVML_ERROR_INVALID_ARGUMENT;
    *type = (nvmlIntNvLinkDeviceType_t)fl_int(0, D "nvlinks.%u.type", d, link);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                         nvmlDevice_t device2,
                                                         nvmlGpuTopologyLevel_t *pathInfo) {
    const char *level;
    nvmlReturn_t rc;
    int a = card(device1, "nvmlDeviceGetTopologyCommonAncestor", &rc), b;
    if (a < 0)
        return rc;
    if ((b = card(device2, "nvmlDeviceGetTopologyCommonAncestor", &rc)) < 0)
        return rc;
    if (!pathInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    level = fl_get("devices.%d.ancestor.%d", a, b);
    if (!level)
        level = fl_get("devices.%d.ancestor.%d", b, a);
    if (!level)
        return NVML_ERROR_NOT_SUPPORTED;
    *pathInfo = (nvmlGpuTopologyLevel_t)atoi(level);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                            nvmlEnableState_t *isPending) {
    CARD("nvmlDeviceGetRetiredPagesPendingStatus");
    *isPending = fl_int(0, D "retired_pending", d) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                          unsigned int *pendingMode) {
    CARD("nvmlDeviceGetMigMode");
    *currentMode = (unsigned int)mig_enabled(d);
    *pendingMode = (unsigned int)fl_int(0, D "mig_mode.pending", d);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    CARD("nvmlDeviceGetMaxMigDeviceCount");
    *count = mig_enabled(d) ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                         nvmlDevice_t *migDevice) {
    CARD("nvmlDeviceGetMigDeviceHandleByIndex");
    if (!mig_enabled(d))
        return NVML_ERROR_NOT_SUPPORTED;
    for (int m = 0; m < fl_count(D "migs", d) && m < MAX_MIG; m++) {
        if (fl_int(-1, D "migs.%d.slot", d, m) == (long long)index) {
            *migDevice = &mig_handles[d][m];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND; /* an empty slot */
}

nvmlReturn_t DECLDIR nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    CARD("nvmlDeviceGetGpuInstanceId");
    if (device->mig < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = (unsigned int)fl_int(0, D "migs.%d.gi", d, device->mig);
    return NVML_SUCCESS;
}

static void process_row(int d, int i, nvmlProcessInfo_t *p) {
    const char *memory = fl_str("0", D "processes.%d.memory", d, i);
    p->pid = (unsigned int)fl_int(0, D "processes.%d.pid", d, i);
    p->usedGpuMemory = strcmp(memory, "na") ? strtoull(memory, NULL, 10)
                                            : (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
    p->gpuInstanceId = (unsigned int)fl_u64(0xFFFFFFFFu, D "processes.%d.gi", d, i);
    p->computeInstanceId = (unsigned int)fl_u64(0xFFFFFFFFu, D "processes.%d.ci", d, i);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos) {
    unsigned int listed, count;
    CARD("nvmlDeviceGetComputeRunningProcesses_v3");
    listed = (unsigned int)fl_count(D "processes", d);
    count = listed + (unsigned int)fl_extra_rows(d, infos != NULL, (int)listed,
                                                 infos ? (int)*infoCount : 0);
    if (!infos || *infoCount < count) {
        *infoCount = count;
        return count == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
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
    return NVML_SUCCESS;
}

static void sample(int d, int i, nvmlProcessUtilizationSample_t *s) {
    memset(s, 0, sizeof *s);
    s->pid = (unsigned int)fl_int(0, D "samples.%d.pid", d, i);
    s->timeStamp = fl_u64(0, D "samples.%d.ts", d, i);
    s->smUtil = (unsigned int)fl_int(0, D "samples.%d.sm", d, i);
    s->memUtil = (unsigned int)fl_int(0, D "samples.%d.mem", d, i);
}

static unsigned int newer_samples(int d, unsigned long long since) {
    unsigned int n = 0;
    for (int i = 0; i < fl_count(D "samples", d); i++)
        if (fl_u64(0, D "samples.%d.ts", d, i) > since)
            n++;
    return n;
}

nvmlReturn_t DECLDIR nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                     nvmlProcessUtilizationSample_t *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp) {
    unsigned int n, j = 0;
    CARD("nvmlDeviceGetProcessUtilization");
    if (mig_enabled(d))
        return NVML_ERROR_NOT_SUPPORTED;
    n = newer_samples(d, lastSeenTimeStamp);
    if (n == 0)
        return NVML_ERROR_NOT_FOUND; /* nothing ran in the window: idle, not a failure */
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < fl_count(D "samples", d); i++)
        if (fl_u64(0, D "samples.%d.ts", d, i) > lastSeenTimeStamp)
            sample(d, i, &utilization[j++]);
    *processSamplesCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                           nvmlProcessesUtilizationInfo_t *info) {
    unsigned int n, j = 0;
    CARD("nvmlDeviceGetProcessesUtilizationInfo");
    if (info->version != nvmlProcessesUtilizationInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (mig_enabled(d))
        return NVML_ERROR_NOT_SUPPORTED;
    n = newer_samples(d, info->lastSeenTimeStamp);
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    if (!info->procUtilArray || info->processSamplesCount < n) {
        info->processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < fl_count(D "samples", d); i++) {
        nvmlProcessUtilizationSample_t s;
        sample(d, i, &s);
        if (s.timeStamp <= info->lastSeenTimeStamp)
            continue;
        memset(&info->procUtilArray[j], 0, sizeof info->procUtilArray[j]);
        info->procUtilArray[j].pid = s.pid;
        info->procUtilArray[j].timeStamp = s.timeStamp;
        info->procUtilArray[j].smUtil = s.smUtil;
        info->procUtilArray[j].memUtil = s.memUtil;
        j++;
    }
    info->processSamplesCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlEventSetCreate(nvmlEventSet_t *set) {
    int code;
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if ((code = fl_fault("nvmlEventSetCreate", -1)) != 0)
        return (nvmlReturn_t)code;
    *set = &the_event_set;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                              nvmlEventSet_t set) {
    CARD("nvmlDeviceRegisterEvents");
    (void)d;
    (void)eventTypes;
    (void)set;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                         unsigned int timeoutms) {
    (void)set;
    (void)timeoutms;
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    for (int i = 0; i < fl_count("devices") && i < FL_MAX_DEVICES; i++) {
        /* xid_delivered[i]: how many of the card's XIDs went out: `xid` first, then xids[]. */
        int single = fl_int(0, D "xid", i) != 0;
        int queued = single + fl_count(D "xids", i);
        if (xid_delivered[i] < queued) {
            int k = xid_delivered[i]++;
            long long xid = single && k == 0 ? fl_int(0, D "xid", i)
                                             : fl_int(0, D "xids.%d", i, k - single);
            memset(data, 0, sizeof *data);
            data->device = &handles[i];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = (unsigned long long)xid;
            data->gpuInstanceId = 0xFFFFFFFFu;
            data->computeInstanceId = 0xFFFFFFFFu;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t DECLDIR nvmlEventSetFree(nvmlEventSet_t set) {
    (void)set;
    return NVML_SUCCESS;
}

/* -- GPM ----------------------------------------------------------------------------------- */

/* How many GPM samples are allocated and not yet freed: for tests, never called by NVML users. */
int fake_gpm_live_samples(void) { return fl_gpm_live; }

/* How many GPM samples were taken since the library was loaded: for tests as well. */
int fake_gpm_samples_taken(void) { return fl_gpm_taken; }

/* How many GPM sample buffers were allocated since the library was loaded: for tests too. */
int fake_gpm_samples_allocated(void) { return fl_gpm_allocated; }

nvmlReturn_t DECLDIR nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    CARD("nvmlGpmQueryDeviceSupport");
    if (!gpmSupport)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    gpmSupport->isSupportedDevice = (unsigned int)fl_int(0, D "gpm", d);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    int code;
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if ((code = fl_fault("nvmlGpmSampleAlloc", -1)) != 0)
        return (nvmlReturn_t)code;
    if (!gpmSample)
        return NVML_ERROR_INVALID_ARGUMENT;
    *gpmSample = (nvmlGpmSample_t)fl_gpm_alloc();
    return *gpmSample ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t DECLDIR nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    return fl_gpm_free(&gpmSample->s) == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t DECLDIR nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                         nvmlGpmSample_t gpmSample) {
    const char *fault;
    int m;
    CARD("nvmlGpmMigSampleGet");
    if (device->mig >= 0 || !gpmSample || !fl_gpm_valid(&gpmSample->s))
        return NVML_ERROR_INVALID_ARGUMENT; /* the parent card's handle and a live sample */
    if (!fl_int(0, D "gpm", d) || !mig_enabled(d))
        return NVML_ERROR_NOT_SUPPORTED;
    if ((m = fl_mig_of_instance(d, gpuInstanceId)) < 0)
        return NVML_ERROR_NOT_FOUND; /* no such GPU instance (destroyed) */
    if ((fault = fl_get(D "migs.%d.faults.nvmlGpmMigSampleGet", d, m)) != NULL)
        return (nvmlReturn_t)atoi(fault);
    fl_gpm_take(&gpmSample->s, d, gpuInstanceId);
    return NVML_SUCCESS;
}

/* A whole card's sample (issue 41): GPU instance -1 in the kit's sample. */
nvmlReturn_t DECLDIR nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    CARD("nvmlGpmSampleGet");
    if (device->mig >= 0 || !gpmSample || !fl_gpm_valid(&gpmSample->s))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!fl_int(0, D "gpm", d))
        return NVML_ERROR_NOT_SUPPORTED; /* before Hopper */
    fl_gpm_take(&gpmSample->s, d, -1);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    const fl_gpm_sample_t *a, *b;
    int m;
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    fl_hang("nvmlGpmMetricsGet");
    if ((m = fl_fault("nvmlGpmMetricsGet", -1)) != 0)
        return (nvmlReturn_t)m;
    if (!metricsGet || metricsGet->numMetrics > NVML_GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    a = metricsGet->sample1 ? &metricsGet->sample1->s : NULL;
    b = metricsGet->sample2 ? &metricsGet->sample2->s : NULL;
    if (!fl_gpm_valid(a) || !fl_gpm_valid(b) || a->dev < 0 || a->dev != b->dev || a->gi != b->gi ||
        b->at <= a->at)
        return NVML_ERROR_INVALID_ARGUMENT; /* two samples of one instance, in order */
    m = fl_mig_of_instance(a->dev, a->gi);
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &metricsGet->metrics[i];
        memset(&metric->metricInfo, 0, sizeof metric->metricInfo);
        metric->value = 0;
        if (a->gi < 0) {
            /* A whole card: the metric ids the scenario's gpm_metrics serves; any other id
             * answers INVALID_ARGUMENT, as a real driver answers an id it does not know. */
            const char *value = fl_get(D "gpm_metrics.%u", a->dev, metric->metricId);
            if (!value)
                metric->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            else if (b->at - a->at < FL_GPM_MIN_INTERVAL)
                metric->nvmlReturn = NVML_ERROR_NOT_READY;
            else {
                metric->nvmlReturn = NVML_SUCCESS;
                metric->value = strtod(value, NULL);
            }
        } else {
            /* A GPU instance: the ids its migs[].gpm_metrics serves (issue 41), and SM
             * activity from its `sm`; any other id NOT_SUPPORTED, what an instance answers
             * for a figure it cannot state. */
            const char *value =
                m < 0 ? NULL : fl_get("devices.%d.migs.%d.gpm_metrics.%u", a->dev, m, metric->metricId);
            if (m < 0 || (!value && metric->metricId != NVML_GPM_METRIC_SM_UTIL))
                metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            else if (b->at - a->at < FL_GPM_MIN_INTERVAL)
                metric->nvmlReturn = NVML_ERROR_NOT_READY;
            else {
                metric->nvmlReturn = NVML_SUCCESS;
                metric->value = value ? strtod(value, NULL)
                                      : fl_double(0, "devices.%d.migs.%d.sm", a->dev, m);
            }
        }
    }
    return NVML_SUCCESS;
}
