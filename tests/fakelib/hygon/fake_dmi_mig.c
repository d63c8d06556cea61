/*
 * A fake libhydmi_mig.so (Hygon's multi-instance library) for tests, on the fake-library kit,
 * compiled against our own declarations (include/hygon_dmi_mig.h). Like the real one it exports
 * NVML's symbol names (nvmlDeviceGetCount, …), so a test can load it beside the fake
 * libnvidia-ml and check that neither answers for the other. It answers from the scenario named
 * by $FAKE_HYGON_MIG_SCENARIO (re-read when the file changes: the real library has no init).
 * Behaviours GPUStack measured on hardware that the backend depends on:
 *
 *   - the mode is the node's (nvmlGetSystemMigMode), not a card's;
 *   - a card is reached by its domain-qualified PCI bus id ("0000:03:00.0"; the short form is
 *     INVALID_ARGUMENT), and its own PCI query answers SUCCESS with an empty string;
 *   - MIG device indexes are node-global: asked of the wrong card, an index is NOT_FOUND;
 *   - no UUID query at all; memory (bytes) and utilization (percent) on a MIG handle are that
 *     instance's own.
 *
 * Two things make it a fair test of how it is loaded: a handle it did not hand out (another
 * library's) is INVALID_ARGUMENT, and nvmlDeviceGetMemoryInfo finds a MIG instance through this
 * library's own exported nvmlDeviceGetGpuInstanceId, a call through the PLT (gcc -fPIC keeps
 * exported functions interposable). Where a libnvidia-ml is in the global namespace and this
 * library is not deep-bound, that call binds to NVIDIA's, which refuses this handle.
 *
 * Scenario: mode{current, pending}, devices[] of {bus_id, index, pci_info (what the PCI query
 * writes; "" by default), max_mig, total, used, util, mem_util, migs[] of {global, gi, ci, total,
 * used (bytes), util (percent; absent: NOT_SUPPORTED), mem_util (the memory's busy percent the
 * same call writes; 0 by default), faults{}}, faults{}}, faults.<entry>, hang.
 */
#include <stdint.h>
#include <strings.h>

#include "fake_scenario.h"
#include "hygon_dmi_mig.h"

#define MAX_MIG 16
#define D "devices.%d."
#define M "devices.%d.migs.%d."

struct dmiDevice_struct {
    int dev;
    int mig; /* position in migs[]; -1 for the card itself */
};

static struct dmiDevice_struct cards[FL_MAX_DEVICES];
static struct dmiDevice_struct migs[FL_MAX_DEVICES][MAX_MIG];

static int begin(const char *entry) {
    fl_hang(entry);
    if (fake_current() != 0)
        return NVML_ERROR_UNINITIALIZED;
    return fl_fault(entry, -1);
}

/* Whether `h` is a handle this library handed out. */
static int ours(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h;
    return (p >= (uintptr_t)cards && p < (uintptr_t)(cards + FL_MAX_DEVICES)) ||
           (p >= (uintptr_t)migs && p < (uintptr_t)migs + sizeof migs);
}

/* The card behind a handle, or -1 with *rc set. */
static int handle(nvmlDevice_t h, const char *entry, nvmlReturn_t *rc) {
    int code = begin(entry);
    if (!code && (!ours(h) || h->dev < 0 || h->dev >= fl_count("devices")))
        code = NVML_ERROR_INVALID_ARGUMENT;
    if (!code && h->mig >= 0)
        code = (int)fl_int(0, M "faults.%s", h->dev, h->mig, entry);
    if (!code && h->mig < 0)
        code = (int)fl_int(0, D "faults.%s", h->dev, entry);
    *rc = (nvmlReturn_t)code;
    return code ? -1 : h->dev;
}

#define HANDLE(entry)                                                                             \
    nvmlReturn_t rc;                                                                              \
    int d = handle(device, entry, &rc);                                                           \
    if (d < 0)                                                                                    \
        return rc;

static int mig_enabled(void) { return (int)fl_int(0, "mode.current") == NVML_DEVICE_MIG_ENABLE; }

nvmlReturn_t nvmlGetSystemMigMode(unsigned int *current_mode, unsigned int *pending_mode) {
    int code = begin("nvmlGetSystemMigMode");
    if (code)
        return (nvmlReturn_t)code;
    if (!current_mode || !pending_mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *current_mode = (unsigned int)fl_int(0, "mode.current");
    *pending_mode = (unsigned int)fl_int(0, "mode.pending");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *device_count) {
    int code = begin("nvmlDeviceGetCount");
    if (code)
        return (nvmlReturn_t)code;
    *device_count = (unsigned int)fl_count("devices");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pci_bus_id, nvmlDevice_t *device) {
    int code = begin("nvmlDeviceGetHandleByPciBusId");
    if (code)
        return (nvmlReturn_t)code;
    if (!pci_bus_id || !device || strlen(pci_bus_id) != 12) /* domain-qualified only */
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int d = 0; d < fl_count("devices") && d < FL_MAX_DEVICES; d++) {
        if (strcasecmp(fl_str("", D "bus_id", d), pci_bus_id) == 0) {
            cards[d].dev = d;
            cards[d].mig = -1;
            *device = &cards[d];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    HANDLE("nvmlDeviceGetIndex");
    *index = (unsigned int)(device->mig < 0 ? fl_int(d, D "index", d)
                                            : fl_int(0, M "global", d, device->mig));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo *pci) {
    HANDLE("nvmlDeviceGetPciInfo");
    memset(pci, 0, sizeof *pci);
    snprintf(pci->bus_id, sizeof pci->bus_id, "%s", fl_str("", D "pci_info", d));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    HANDLE("nvmlDeviceGetMaxMigDeviceCount");
    *count = (unsigned int)fl_int(4, D "max_mig", d);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *mig_device) {
    HANDLE("nvmlDeviceGetMigDeviceHandleByIndex");
    if (!mig_enabled())
        return NVML_ERROR_NOT_SUPPORTED;
    for (int m = 0; m < fl_count(D "migs", d) && m < MAX_MIG; m++) {
        if (fl_int(-1, M "global", d, m) == (long long)index) {
            migs[d][m].dev = d;
            migs[d][m].mig = m;
            *mig_device = &migs[d][m];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND; /* another card's index, or an empty one */
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *gpu_instance_id) {
    HANDLE("nvmlDeviceGetGpuInstanceId");
    if (device->mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *gpu_instance_id = (unsigned int)fl_int(0, M "gi", d, device->mig);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                            unsigned int *compute_instance_id) {
    HANDLE("nvmlDeviceGetComputeInstanceId");
    if (device->mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *compute_instance_id = (unsigned int)fl_int(0, M "ci", d, device->mig);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    unsigned int gi, ci;
    int m = -1;
    HANDLE("nvmlDeviceGetMemoryInfo");
    if (device->mig < 0) {
        memory->total = fl_u64(0, D "total", d);
        memory->used = fl_u64(0, D "used", d);
    } else {
        /* The instance by its GPU and compute instance ids, asked of this library's own
         * exported getters. */
        if ((rc = nvmlDeviceGetGpuInstanceId(device, &gi)) != NVML_SUCCESS ||
            (rc = nvmlDeviceGetComputeInstanceId(device, &ci)) != NVML_SUCCESS)
            return rc;
        for (int k = 0; k < fl_count(D "migs", d) && k < MAX_MIG && m < 0; k++)
            if (fl_int(-1, M "gi", d, k) == gi && fl_int(-1, M "ci", d, k) == ci)
                m = k;
        if (m < 0)
            return NVML_ERROR_NOT_FOUND;
        memory->total = fl_u64(0, M "total", d, m);
        memory->used = fl_u64(0, M "used", d, m);
    }
    memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    const char *util;
    HANDLE("nvmlDeviceGetUtilizationRates");
    util = device->mig < 0 ? fl_get(D "util", d) : fl_get(M "util", d, device->mig);
    if (!util)
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = (unsigned int)atoi(util);
    /* The memory's busy percent, which the one call writes beside the compute's. */
    utilization->memory = (unsigned int)(device->mig < 0 ? fl_int(0, D "mem_util", d)
                                                         : fl_int(0, M "mem_util", d, device->mig));
    return NVML_SUCCESS;
}
