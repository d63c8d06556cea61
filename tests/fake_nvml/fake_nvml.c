/*
 * A fake libnvidia-ml.so.1 for tests: the NVML entry points the agent calls through pynvml,
 * compiled against NVIDIA's own nvml.h (PyPI nvidia-nvml-dev, installed at test time) so every
 * signature and struct layout is the real one. What it answers comes from the scenario file
 * named by $FAKE_NVML_SCENARIO, read at each nvmlInit. It reproduces the driver behaviours the
 * agent depends on (facts in the project's reference notes on NVML, §2.3):
 *
 *   - the process-list probe: NULL buffer -> INSUFFICIENT_SIZE with the count, SUCCESS when
 *     there are none; a list that grows between the probe and the read;
 *   - NVML_VALUE_NOT_AVAILABLE as a process's memory; GI/CI 0xFFFFFFFF with MIG off;
 *   - NOT_FOUND from the process-utilization call when no sample is newer than asked;
 *   - NOT_SUPPORTED for utilization on a MIG-enabled card; NOT_FOUND for an empty MIG slot;
 *   - version checks on versioned structs (ARGUMENT_VERSION_MISMATCH);
 *   - GPU_IS_LOST from every call on a lost card; an XID delivered once through the event set;
 *   - any entry point failing with any code ("error <entry point> <code>").
 *
 * Scenario file, one directive per line ('#' comments):
 *   driver <version>
 *   device                                  starts a card; the keys below apply to it
 *     uuid <GPU-…>      name <rest of line>  index <n>
 *     memory <total> <used> <reserved>      bytes
 *     util <gpu%> <mem%>   temp <°C>   power <mW>
 *     remapped <corr> <unc> <pending> <failure>   retired_pending <0|1>
 *     mig_mode <current> <pending>   lost 1   lose_after <n UUID reads>   xid <code>
 *     process <pid> <bytes|na> [gi ci]
 *     sample <pid> <timestamp µs> <sm%> <mem%>
 *     grow <extra processes> <once|always>
 *     error <entry point> <nvmlReturn_t>
 *   mig <slot>                              a MIG device of the last card
 *     uuid <MIG-…>   gi <id>   memory <total> <used>   error <entry point> <code>
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml.h"

#define MAX_DEVICES 16
#define MAX_MIG 8
#define MAX_PROCS 64
#define MAX_SAMPLES 128
#define MAX_ERRORS 32

struct nvmlDevice_st {
    int dev;
    int mig; /* -1 for the card itself */
};

struct nvmlEventSet_st {
    int unused;
};

typedef struct {
    char name[96];
    int code;
} injected_t;

typedef struct {
    int present;
    char uuid[96];
    unsigned int gi;
    unsigned long long total, used;
    injected_t errors[MAX_ERRORS];
    int nerrors;
} mig_t;

typedef struct {
    char uuid[96], name[96];
    unsigned int index;
    unsigned long long total, used, reserved;
    unsigned int util_gpu, util_mem, temp, power;
    unsigned int corr, unc, pending, failure, retired_pending;
    unsigned int mig_current, mig_pending;
    int lost, lose_after, uuid_calls, xid, xid_delivered;
    nvmlProcessInfo_t procs[MAX_PROCS];
    int nprocs;
    nvmlProcessUtilizationSample_t samples[MAX_SAMPLES];
    int nsamples;
    int grow, grow_always, grown, extra; /* extra: processes that started after the probe */
    injected_t errors[MAX_ERRORS];
    int nerrors;
    mig_t migs[MAX_MIG];
    struct nvmlDevice_st handle;
    struct nvmlDevice_st mig_handles[MAX_MIG];
} device_t;

static device_t devices[MAX_DEVICES];
static int ndevices;
static char driver[80] = "550.90.07";
static int initialised;
static struct nvmlEventSet_st the_event_set;

static void add_error(injected_t *errors, int *n, const char *name, int code) {
    if (*n < MAX_ERRORS) {
        snprintf(errors[*n].name, sizeof errors[*n].name, "%s", name);
        errors[*n].code = code;
        (*n)++;
    }
}

static int load(const char *path) {
    FILE *f = fopen(path, "r");
    char line[512], key[64];
    device_t *d = NULL;
    mig_t *m = NULL;
    if (!f)
        return NVML_ERROR_UNINITIALIZED;
    memset(devices, 0, sizeof devices);
    ndevices = 0;
    while (fgets(line, sizeof line, f)) {
        char *rest;
        line[strcspn(line, "\r\n")] = 0;
        if (sscanf(line, " %63s", key) != 1 || key[0] == '#')
            continue;
        rest = strstr(line, key) + strlen(key);
        while (*rest == ' ')
            rest++;
        if (!strcmp(key, "driver")) {
            snprintf(driver, sizeof driver, "%s", rest);
        } else if (!strcmp(key, "device") && ndevices < MAX_DEVICES) {
            d = &devices[ndevices];
            d->index = ndevices;
            d->handle.dev = ndevices;
            d->handle.mig = -1;
            ndevices++;
            m = NULL;
        } else if (!d) {
            continue;
        } else if (!strcmp(key, "mig")) {
            int slot = atoi(rest);
            if (slot >= 0 && slot < MAX_MIG) {
                m = &d->migs[slot];
                m->present = 1;
                d->mig_handles[slot].dev = (int)(d - devices);
                d->mig_handles[slot].mig = slot;
            }
        } else if (m && !strcmp(key, "uuid")) {
            snprintf(m->uuid, sizeof m->uuid, "%s", rest);
        } else if (m && !strcmp(key, "gi")) {
            m->gi = (unsigned int)strtoul(rest, NULL, 10);
        } else if (m && !strcmp(key, "memory")) {
            sscanf(rest, "%llu %llu", &m->total, &m->used);
        } else if (m && !strcmp(key, "error")) {
            char name[96];
            int code;
            if (sscanf(rest, "%95s %d", name, &code) == 2)
                add_error(m->errors, &m->nerrors, name, code);
        } else if (!strcmp(key, "uuid")) {
            snprintf(d->uuid, sizeof d->uuid, "%s", rest);
        } else if (!strcmp(key, "name")) {
            snprintf(d->name, sizeof d->name, "%s", rest);
        } else if (!strcmp(key, "index")) {
            d->index = (unsigned int)strtoul(rest, NULL, 10);
        } else if (!strcmp(key, "memory")) {
            sscanf(rest, "%llu %llu %llu", &d->total, &d->used, &d->reserved);
        } else if (!strcmp(key, "util")) {
            sscanf(rest, "%u %u", &d->util_gpu, &d->util_mem);
        } else if (!strcmp(key, "temp")) {
            d->temp = (unsigned int)strtoul(rest, NULL, 10);
        } else if (!strcmp(key, "power")) {
            d->power = (unsigned int)strtoul(rest, NULL, 10);
        } else if (!strcmp(key, "remapped")) {
            sscanf(rest, "%u %u %u %u", &d->corr, &d->unc, &d->pending, &d->failure);
        } else if (!strcmp(key, "retired_pending")) {
            d->retired_pending = (unsigned int)strtoul(rest, NULL, 10);
        } else if (!strcmp(key, "mig_mode")) {
            sscanf(rest, "%u %u", &d->mig_current, &d->mig_pending);
        } else if (!strcmp(key, "lost")) {
            d->lost = atoi(rest);
        } else if (!strcmp(key, "lose_after")) {
            d->lose_after = atoi(rest);
        } else if (!strcmp(key, "xid")) {
            d->xid = atoi(rest);
        } else if (!strcmp(key, "process") && d->nprocs < MAX_PROCS) {
            nvmlProcessInfo_t *p = &d->procs[d->nprocs++];
            char bytes[32];
            unsigned int gi = 0xFFFFFFFFu, ci = 0xFFFFFFFFu;
            sscanf(rest, "%u %31s %u %u", &p->pid, bytes, &gi, &ci);
            p->usedGpuMemory = strcmp(bytes, "na") ? strtoull(bytes, NULL, 10)
                                                   : (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
            p->gpuInstanceId = gi;
            p->computeInstanceId = ci;
        } else if (!strcmp(key, "sample") && d->nsamples < MAX_SAMPLES) {
            nvmlProcessUtilizationSample_t *s = &d->samples[d->nsamples++];
            sscanf(rest, "%u %llu %u %u", &s->pid, &s->timeStamp, &s->smUtil, &s->memUtil);
        } else if (!strcmp(key, "grow")) {
            char mode[16] = "once";
            sscanf(rest, "%d %15s", &d->grow, mode);
            d->grow_always = !strcmp(mode, "always");
        } else if (!strcmp(key, "error")) {
            char name[96];
            int code;
            if (sscanf(rest, "%95s %d", name, &code) == 2)
                add_error(d->errors, &d->nerrors, name, code);
        }
    }
    fclose(f);
    return NVML_SUCCESS;
}

static int injected(const injected_t *errors, int n, const char *entry) {
    for (int i = 0; i < n; i++)
        if (!strcmp(errors[i].name, entry))
            return errors[i].code;
    return 0;
}

/* The card behind a handle, or NULL; sets *rc to what the call must answer first. */
static device_t *card(nvmlDevice_t h, const char *entry, nvmlReturn_t *rc) {
    device_t *d;
    if (!initialised) {
        *rc = NVML_ERROR_UNINITIALIZED;
        return NULL;
    }
    if (!h || h->dev < 0 || h->dev >= ndevices) {
        *rc = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    d = &devices[h->dev];
    if (d->lost) {
        *rc = NVML_ERROR_GPU_IS_LOST;
        return NULL;
    }
    if (h->mig >= 0) {
        int code = injected(d->migs[h->mig].errors, d->migs[h->mig].nerrors, entry);
        *rc = code ? (nvmlReturn_t)code : NVML_SUCCESS;
    } else {
        int code = injected(d->errors, d->nerrors, entry);
        *rc = code ? (nvmlReturn_t)code : NVML_SUCCESS;
    }
    return *rc == NVML_SUCCESS ? d : NULL;
}

#define CARD(entry)                                                                               \
    nvmlReturn_t rc;                                                                              \
    device_t *d = card(device, entry, &rc);                                                       \
    if (!d)                                                                                       \
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
    const char *path = getenv("FAKE_NVML_SCENARIO");
    (void)flags;
    if (!path)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (load(path) != NVML_SUCCESS)
        return NVML_ERROR_UNINITIALIZED;
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
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, driver);
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    *count = (unsigned int)ndevices;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= (unsigned int)ndevices)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index].handle;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (initialised && device && device->dev >= 0 && device->dev < ndevices && device->mig < 0) {
        device_t *c = &devices[device->dev];
        /* A card that falls off the bus after answering `lose_after` times. */
        if (c->lose_after && ++c->uuid_calls > c->lose_after)
            c->lost = 1;
    }
    CARD("nvmlDeviceGetUUID");
    return copy_string(uuid, length, device->mig >= 0 ? d->migs[device->mig].uuid : d->uuid);
}

nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    CARD("nvmlDeviceGetName");
    return copy_string(name, length, d->name);
}

nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    CARD("nvmlDeviceGetIndex");
    *index = d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    CARD("nvmlDeviceGetMemoryInfo");
    if (device->mig >= 0) {
        mig_t *m = &d->migs[device->mig];
        memory->total = m->total;
        memory->used = m->used;
    } else {
        /* v1 counts the driver's reservation as used. */
        memory->total = d->total;
        memory->used = d->used + d->reserved;
    }
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    CARD("nvmlDeviceGetMemoryInfo_v2");
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (device->mig >= 0) {
        mig_t *m = &d->migs[device->mig];
        memory->total = m->total;
        memory->used = m->used;
        memory->reserved = 0;
    } else {
        memory->total = d->total;
        memory->used = d->used;
        memory->reserved = d->reserved;
    }
    memory->free = memory->total - memory->used - memory->reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    CARD("nvmlDeviceGetUtilizationRates");
    if (d->mig_current)
        return NVML_ERROR_NOT_SUPPORTED; /* no utilization on a MIG-enabled card */
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTemperature(nvmlDevice_t device,
                                              nvmlTemperatureSensors_t sensorType,
                                              unsigned int *temp) {
    CARD("nvmlDeviceGetTemperature");
    if (sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temp;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    CARD("nvmlDeviceGetPowerUsage");
    *power = d->power;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                               unsigned int *uncRows, unsigned int *isPending,
                                               unsigned int *failureOccurred) {
    CARD("nvmlDeviceGetRemappedRows");
    *corrRows = d->corr;
    *uncRows = d->unc;
    *isPending = d->pending;
    *failureOccurred = d->failure;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                            nvmlEnableState_t *isPending) {
    CARD("nvmlDeviceGetRetiredPagesPendingStatus");
    *isPending = d->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                          unsigned int *pendingMode) {
    CARD("nvmlDeviceGetMigMode");
    *currentMode = d->mig_current;
    *pendingMode = d->mig_pending;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    CARD("nvmlDeviceGetMaxMigDeviceCount");
    *count = d->mig_current ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                         nvmlDevice_t *migDevice) {
    CARD("nvmlDeviceGetMigDeviceHandleByIndex");
    if (!d->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= MAX_MIG || !d->migs[index].present)
        return NVML_ERROR_NOT_FOUND; /* an empty slot */
    *migDevice = &d->mig_handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    CARD("nvmlDeviceGetGpuInstanceId");
    if (device->mig < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = d->migs[device->mig].gi;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos) {
    unsigned int count;
    CARD("nvmlDeviceGetComputeRunningProcesses_v3");
    if (infos && d->grow && !d->grow_always && !d->grown) {
        /* Processes started between the caller's probe and this read; they stay. */
        d->grown = 1;
        d->extra = d->grow;
    }
    count = (unsigned int)(d->nprocs + d->extra);
    if (infos && d->grow_always)
        count = *infoCount + (unsigned int)d->grow; /* always more than the caller allowed for */
    if (!infos || *infoCount < count) {
        *infoCount = count;
        return count == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < count; i++) {
        if (i < (unsigned int)d->nprocs) {
            infos[i] = d->procs[i];
        } else {
            infos[i].pid = 900000 + i;
            infos[i].usedGpuMemory = 1048576ULL;
            infos[i].gpuInstanceId = 0xFFFFFFFFu;
            infos[i].computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *infoCount = count;
    return NVML_SUCCESS;
}

static unsigned int newer_samples(device_t *d, unsigned long long since) {
    unsigned int n = 0;
    for (int i = 0; i < d->nsamples; i++)
        if (d->samples[i].timeStamp > since)
            n++;
    return n;
}

nvmlReturn_t DECLDIR nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                     nvmlProcessUtilizationSample_t *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp) {
    unsigned int n, j = 0;
    CARD("nvmlDeviceGetProcessUtilization");
    if (d->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    n = newer_samples(d, lastSeenTimeStamp);
    if (n == 0)
        return NVML_ERROR_NOT_FOUND; /* nothing ran in the window: idle, not a failure */
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < d->nsamples; i++)
        if (d->samples[i].timeStamp > lastSeenTimeStamp)
            utilization[j++] = d->samples[i];
    *processSamplesCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                           nvmlProcessesUtilizationInfo_t *info) {
    unsigned int n, j = 0;
    CARD("nvmlDeviceGetProcessesUtilizationInfo");
    if (info->version != nvmlProcessesUtilizationInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    n = newer_samples(d, info->lastSeenTimeStamp);
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    if (!info->procUtilArray || info->processSamplesCount < n) {
        info->processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < d->nsamples; i++) {
        nvmlProcessUtilizationSample_t *s = &d->samples[i];
        if (s->timeStamp <= info->lastSeenTimeStamp)
            continue;
        memset(&info->procUtilArray[j], 0, sizeof info->procUtilArray[j]);
        info->procUtilArray[j].pid = s->pid;
        info->procUtilArray[j].timeStamp = s->timeStamp;
        info->procUtilArray[j].smUtil = s->smUtil;
        info->procUtilArray[j].memUtil = s->memUtil;
        j++;
    }
    info->processSamplesCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    *set = &the_event_set;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                              nvmlEventSet_t set) {
    CARD("nvmlDeviceRegisterEvents");
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
    for (int i = 0; i < ndevices; i++) {
        if (devices[i].xid && !devices[i].xid_delivered) {
            devices[i].xid_delivered = 1;
            memset(data, 0, sizeof *data);
            data->device = &devices[i].handle;
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = (unsigned long long)devices[i].xid;
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
