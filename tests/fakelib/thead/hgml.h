/*
 * HGML declarations for the fake libhgml.so: written by this project from the facts of the
 * public hgml.h (HGML_API_VERSION 13; a copy is in gpustack/gpustack-operator, binding/hgml/),
 * never copied. Only what the agent calls: the entry points of vendors/_thead_lib.py, the
 * structs they fill and the constants they take. The ABI tests compile a probe against this
 * file and compare every struct with our ctypes declarations.
 */
#ifndef FAKE_HGML_H
#define FAKE_HGML_H

typedef enum {
    HGML_SUCCESS = 0,
    HGML_ERROR_UNINITIALIZED = 1,
    HGML_ERROR_INVALID_ARGUMENT = 2,
    HGML_ERROR_NOT_SUPPORTED = 3,
    HGML_ERROR_NO_PERMISSION = 4,
    HGML_ERROR_NOT_FOUND = 6,
    HGML_ERROR_INSUFFICIENT_SIZE = 7,
    HGML_ERROR_DRIVER_NOT_LOADED = 9,
    HGML_ERROR_TIMEOUT = 10,
    HGML_ERROR_FUNCTION_NOT_FOUND = 13,
    HGML_ERROR_GPU_IS_LOST = 15,
    HGML_ERROR_MEMORY = 20,
    HGML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    HGML_ERROR_NOT_READY = 27,
    HGML_ERROR_UNKNOWN = 999
} hgmlReturn_t;

#define HGML_VALUE_NOT_AVAILABLE (-1)
#define HGML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(hgml##data##_v##ver##_t) | ((ver) << 24U))

/* Handles are one-pointer structs, passed by value. */
typedef struct {
    struct hgmlDevice_st *handle;
} hgmlDevice_t;

typedef struct {
    struct hgmlGpmSample_st *handle;
} hgmlGpmSample_t;

typedef enum { HGML_TEMPERATURE_GPU = 0 } hgmlTemperatureSensors_t;
typedef enum { HGML_FEATURE_DISABLED = 0, HGML_FEATURE_ENABLED = 1 } hgmlEnableState_t;

/* The versioned temperature reading of hgmlDeviceGetTemperatureV. */
typedef struct {
    unsigned int version;
    hgmlTemperatureSensors_t sensorType;
    int temperature; /* degrees C, signed */
} hgmlTemperature_v1_t;

#define hgmlTemperature_v1 HGML_STRUCT_VERSION(Temperature, 1)

/* The card's health figures (issue 29): NVML's enums under HGML's prefix. */
typedef enum {
    HGML_MEMORY_ERROR_TYPE_CORRECTED = 0,
    HGML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
    HGML_MEMORY_ERROR_TYPE_COUNT
} hgmlMemoryErrorType_t;

typedef enum {
    HGML_VOLATILE_ECC = 0,
    HGML_AGGREGATE_ECC = 1,
    HGML_ECC_COUNTER_TYPE_COUNT
} hgmlEccCounterType_t;

typedef enum {
    HGML_CLOCK_GRAPHICS = 0,
    HGML_CLOCK_SM = 1,
    HGML_CLOCK_MEM = 2,
    HGML_CLOCK_VIDEO = 3,
    HGML_CLOCK_COUNT
} hgmlClockType_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} hgmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} hgmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} hgmlMemory_v2_t;

#define hgmlMemory_v2 HGML_STRUCT_VERSION(Memory, 2)

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory; /* bytes */
    unsigned int gpuInstanceId;       /* 0xFFFFFFFF with MIG off */
    unsigned int computeInstanceId;
} hgmlProcessInfo_v2_t, hgmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp; /* CPU time stamp, microseconds */
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} hgmlProcessUtilizationSample_t;

#define HGML_GPM_METRIC_SM_UTIL 2
#define HGML_GPM_METRIC_MAX 2052

typedef struct {
    unsigned int metricId;
    hgmlReturn_t hgmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} hgmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    hgmlGpmSample_t sample1;
    hgmlGpmSample_t sample2;
    hgmlGpmMetric_t metrics[HGML_GPM_METRIC_MAX];
} hgmlGpmMetricsGet_t;

#define HGML_GPM_METRICS_GET_VERSION 1

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} hgmlGpmSupport_t;

#define HGML_GPM_SUPPORT_VERSION 2

/* Links and placement. */
#define HGML_DEVICE_PCI_BUS_ID_BUFFER_SIZE (32 - 4) /* 4 bytes reserved for globalPpuId */
#define HGML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

typedef struct {
    char busIdLegacy[HGML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[HGML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int globalPpuId;
} hgmlPciInfo_t;

typedef enum {
    HGML_TOPOLOGY_INTERNAL = 0,
    HGML_TOPOLOGY_SINGLE = 10,
    HGML_TOPOLOGY_MULTIPLE = 20,
    HGML_TOPOLOGY_HOSTBRIDGE = 30,
    HGML_TOPOLOGY_NODE = 40,
    HGML_TOPOLOGY_SYSTEM = 50
} hgmlGpuTopologyLevel_t;

typedef enum {
    HGML_ICNLINK_DEVICE_TYPE_PPU = 0x00,
    HGML_ICNLINK_DEVICE_TYPE_SWITCH = 0x02,
    HGML_ICNLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} hgmlIntIcnLinkDeviceType_t;

/* XID events: an opaque event set, and what hgmlEventSetWait_v2 fills (NVML's layout). */
typedef struct hgmlEventSet_st *hgmlEventSet_t;

#define hgmlEventTypeXidCriticalError 0x0000000000000008LL

typedef struct {
    hgmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} hgmlEventData_t;

hgmlReturn_t hgmlInitWithFlags(unsigned int flags);
hgmlReturn_t hgmlShutdown(void);
hgmlReturn_t hgmlSystemGetDriverVersion(char *version, unsigned int length);
hgmlReturn_t hgmlDeviceGetCount_v2(unsigned int *deviceCount);
hgmlReturn_t hgmlDeviceGetHandleByIndex_v2(unsigned int index, hgmlDevice_t *device);
hgmlReturn_t hgmlDeviceGetUUID(hgmlDevice_t device, char *uuid, unsigned int length);
hgmlReturn_t hgmlDeviceGetName(hgmlDevice_t device, char *name, unsigned int length);
hgmlReturn_t hgmlDeviceGetIndex(hgmlDevice_t device, unsigned int *index);
hgmlReturn_t hgmlDeviceGetMemoryInfo(hgmlDevice_t device, hgmlMemory_t *memory);
hgmlReturn_t hgmlDeviceGetMemoryInfo_v2(hgmlDevice_t device, hgmlMemory_v2_t *memory);
hgmlReturn_t hgmlDeviceGetUtilizationRates(hgmlDevice_t device, hgmlUtilization_t *utilization);
hgmlReturn_t hgmlDeviceGetTemperature(hgmlDevice_t device, hgmlTemperatureSensors_t sensorType,
                                      unsigned int *temp);
hgmlReturn_t hgmlDeviceGetPowerUsage(hgmlDevice_t device, unsigned int *power);
hgmlReturn_t hgmlDeviceGetTemperatureV(hgmlDevice_t device, hgmlTemperature_v1_t *temperature);
hgmlReturn_t hgmlDeviceGetTotalEccErrors(hgmlDevice_t device, hgmlMemoryErrorType_t errorType,
                                         hgmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts);
hgmlReturn_t hgmlDeviceGetTotalEnergyConsumption(hgmlDevice_t device, unsigned long long *energy);
hgmlReturn_t hgmlDeviceGetCurrentClocksEventReasons(hgmlDevice_t device,
                                                    unsigned long long *reasons);
hgmlReturn_t hgmlDeviceGetCurrentClocksThrottleReasons(hgmlDevice_t device,
                                                       unsigned long long *reasons);
hgmlReturn_t hgmlDeviceGetClockInfo(hgmlDevice_t device, hgmlClockType_t type, unsigned int *clock);
hgmlReturn_t hgmlDeviceGetPcieReplayCounter(hgmlDevice_t device, unsigned int *value);
hgmlReturn_t hgmlDeviceGetRemappedRows(hgmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred);
hgmlReturn_t hgmlDeviceGetRetiredPagesPendingStatus(hgmlDevice_t device,
                                                    hgmlEnableState_t *isPending);
hgmlReturn_t hgmlDeviceGetMigMode(hgmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode);
hgmlReturn_t hgmlDeviceGetMaxMigDeviceCount(hgmlDevice_t device, unsigned int *count);
hgmlReturn_t hgmlDeviceGetMigDeviceHandleByIndex(hgmlDevice_t device, unsigned int index,
                                                 hgmlDevice_t *migDevice);
hgmlReturn_t hgmlDeviceGetGpuInstanceId(hgmlDevice_t device, unsigned int *id);
hgmlReturn_t hgmlDeviceGetComputeRunningProcesses_v3(hgmlDevice_t device, unsigned int *infoCount,
                                                     hgmlProcessInfo_t *infos);
hgmlReturn_t hgmlDeviceGetProcessUtilization(hgmlDevice_t device,
                                             hgmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp);
hgmlReturn_t hgmlGpmQueryDeviceSupport(hgmlDevice_t device, hgmlGpmSupport_t *gpmSupport);
hgmlReturn_t hgmlGpmSampleAlloc(hgmlGpmSample_t *gpmSample);
hgmlReturn_t hgmlGpmSampleFree(hgmlGpmSample_t gpmSample);
hgmlReturn_t hgmlGpmMigSampleGet(hgmlDevice_t device, unsigned int gpuInstanceId,
                                 hgmlGpmSample_t gpmSample);
hgmlReturn_t hgmlGpmSampleGet(hgmlDevice_t device, hgmlGpmSample_t gpmSample);
hgmlReturn_t hgmlGpmMetricsGet(hgmlGpmMetricsGet_t *metricsGet);
hgmlReturn_t hgmlDeviceGetPciInfo_v3(hgmlDevice_t device, hgmlPciInfo_t *pci);
hgmlReturn_t hgmlDeviceGetTopologyCommonAncestor(hgmlDevice_t device1, hgmlDevice_t device2,
                                                 hgmlGpuTopologyLevel_t *pathInfo);
hgmlReturn_t hgmlDeviceGetIcnLinkState(hgmlDevice_t device, unsigned int link,
                                       hgmlEnableState_t *isActive);
hgmlReturn_t hgmlDeviceGetIcnLinkRemotePciInfo_v2(hgmlDevice_t device, unsigned int link,
                                                  hgmlPciInfo_t *pci);
hgmlReturn_t hgmlDeviceGetIcnLinkRemoteDeviceType(hgmlDevice_t device, unsigned int link,
                                                  hgmlIntIcnLinkDeviceType_t *type);
hgmlReturn_t hgmlEventSetCreate(hgmlEventSet_t *set);
hgmlReturn_t hgmlDeviceRegisterEvents(hgmlDevice_t device, unsigned long long eventTypes,
                                      hgmlEventSet_t set);
hgmlReturn_t hgmlEventSetWait_v2(hgmlEventSet_t set, hgmlEventData_t *data,
                                 unsigned int timeoutms);
hgmlReturn_t hgmlEventSetFree(hgmlEventSet_t set);

#endif
