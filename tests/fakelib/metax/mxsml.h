/*
 * Our declarations of the MXSML entry points and structures the metax backend uses, written
 * for this project from the layouts MetaX documents for MXSML 2.3.1 (the entry points, field
 * order, field types and units, as described in the project's reference notes, vendors.md §5
 * and §12). Not MetaX's header: only what the fake library and the ABI probe need, in our
 * words. The field names follow the documented ones so the ctypes module can be compared
 * field by field.
 */
#ifndef DEVICEMANAGER_FAKE_MXSML_H
#define DEVICEMANAGER_FAKE_MXSML_H

/* Return codes: sequential from 0, as documented. */
typedef unsigned int mxsml_rc;
#define MXSML_OK 0u
#define MXSML_FAILURE 1u
#define MXSML_NO_DEVICE 2u
#define MXSML_NOT_SUPPORTED 3u
#define MXSML_SYSFS_ERROR 4u
#define MXSML_INVALID_DEVICE 6u
#define MXSML_PERMISSION_DENIED 8u
#define MXSML_INVALID_INPUT 9u
#define MXSML_INSUFFICIENT_SIZE 10u

/* Virtualization mode of a device: bare metal, SR-IOV physical function, virtual function. */
#define MXSML_MODE_NONE 0u
#define MXSML_MODE_PF 1u
#define MXSML_MODE_VF 2u

/* Brands: N-class (inference), C-class (the C500 family), G-class. */
#define MXSML_BRAND_N 1u
#define MXSML_BRAND_C 2u

#define MXSML_USAGE_DLA 0u   /* N-class compute */
#define MXSML_USAGE_XCORE 4u /* C-class compute */
#define MXSML_TEMPERATURE_HOTSPOT 0u
#define MXSML_VERSION_DRIVER 1u
#define MXSML_INIT_REINIT 1u
/* mxSmlClockIp_t: the memory controller and the compute cores of a C-class card (MHz). */
#define MXSML_CLOCK_MC0 3u
#define MXSML_CLOCK_XCORE 11u

#define MXSML_BDF_LEN 32
#define MXSML_UUID_LEN 96
#define MXSML_NAME_LEN 32
#define MXSML_PROCESS_NAME_LEN 64
#define MXSML_GPUS_PER_PROCESS 64
#define MXSML_MAX_SGPU 16

typedef struct {
    unsigned int deviceId;
    unsigned int type; /* deprecated, always 0 */
    char bdfId[MXSML_BDF_LEN];
    unsigned int gpuId; /* the driver's own id of the card, not the enumeration index */
    unsigned int nodeId;
    char uuid[MXSML_UUID_LEN];
    unsigned int brand;
    unsigned int mode;
    char deviceName[MXSML_NAME_LEN];
} mxSmlDeviceInfo_t;

/* Device memory, in KB. */
typedef struct {
    long visVramTotal;
    long visVramUse;
    long vramTotal;
    long vramUse;
    long xttTotal;
    long xttUse;
} mxSmlMemoryInfo_t;

/* One supply rail of the board: mV, mA, mW. */
typedef struct {
    unsigned int voltage;
    unsigned int current;
    unsigned int power;
} mxSmlBoardWayElectricInfo_t;

/* One GPU a process uses; gpuId is the enumeration (sequence) index; memory in bytes. */
typedef struct {
    char bdfId[MXSML_BDF_LEN];
    unsigned int gpuId;
    unsigned long gpuMemoryUsage;
} mxSmlProcessGpuInfo_t;

typedef struct {
    char bdfId[MXSML_BDF_LEN];
    unsigned int gpuId;
    unsigned long gpuMemoryUsage;
    unsigned int dieId;
} mxSmlProcessGpuInfo_v2_t;

typedef struct {
    char bdfId[MXSML_BDF_LEN];
    unsigned int gpuId;
    unsigned long gpuMemoryUsage;
    unsigned int dieId;
    int sgpuId; /* -1: the process runs on the whole card (sGPU mode off) */
} mxSmlProcessGpuInfo_v3_t;

typedef struct {
    unsigned int processId;
    char processName[MXSML_PROCESS_NAME_LEN];
    unsigned int gpuNumber;
    mxSmlProcessGpuInfo_t processGpuInfo[MXSML_GPUS_PER_PROCESS];
} mxSmlProcessInfo_t;

typedef struct {
    unsigned int processId;
    char processName[MXSML_PROCESS_NAME_LEN];
    unsigned int gpuNumber;
    mxSmlProcessGpuInfo_v2_t processGpuInfo[MXSML_GPUS_PER_PROCESS];
} mxSmlProcessInfo_v2_t;

typedef struct {
    unsigned int processId;
    char processName[MXSML_PROCESS_NAME_LEN];
    unsigned int gpuNumber;
    mxSmlProcessGpuInfo_v3_t processGpuInfo[MXSML_GPUS_PER_PROCESS];
} mxSmlProcessInfo_v3_t;

/* ECC error counts of the SRAM and the DRAM, and the pages retired. */
typedef struct {
    unsigned int sramCE;
    unsigned int sramUE;
    unsigned int dramCE;
    unsigned int dramUE;
    unsigned int retiredPage;
} mxSmlEccErrorCount_t;

/* A slice GPU: quotas in MB and percent. */
typedef struct {
    unsigned int parentDeviceId;
    unsigned int sgpuId;
    unsigned int vramQuota;
    unsigned int swQueuePriority;
    unsigned int computeQuota;
    unsigned int minor;
    unsigned int deviceQueuePriority;
    char uuid[MXSML_UUID_LEN];
} mxSmlSgpuInfo_t;

/* A slice GPU's memory, in bytes. */
typedef struct {
    long total;
    long used;
    long free;
} mxSmlSgpuMemoryInfo_t;

mxsml_rc mxSmlInit(void); /* a second call does not look for cards again */
mxsml_rc mxSmlInitWithFlags(unsigned int flags); /* MXSML_INIT_REINIT: it does */
unsigned int mxSmlGetDeviceCount(void); /* the count is the return value */
mxsml_rc mxSmlGetDeviceInfo(unsigned int deviceId, mxSmlDeviceInfo_t *info);
mxsml_rc mxSmlGetDeviceVersion(unsigned int deviceId, unsigned int unit, char *version,
                               unsigned int *size);
mxsml_rc mxSmlGetDeviceState(unsigned int deviceId, int *state);
mxsml_rc mxSmlGetMemoryInfo(unsigned int deviceId, mxSmlMemoryInfo_t *memory);
mxsml_rc mxSmlGetDeviceIpUsage(unsigned int deviceId, unsigned int ip, int *usage);
mxsml_rc mxSmlGetTemperatureInfo(unsigned int deviceId, unsigned int sensor, int *temperature);
mxsml_rc mxSmlGetTotalEccErrors(unsigned int deviceId, mxSmlEccErrorCount_t *eccCounts);
mxsml_rc mxSmlGetCurrentClocksThrottleReason(unsigned int deviceId,
                                             unsigned long long *clocksThrottleReasons);
mxsml_rc mxSmlGetClocks(unsigned int deviceId, unsigned int clockIp, unsigned int *clocksSize,
                        unsigned int *clocksMhz);
/* How two devices are joined, mxSmlGpuTopologyLevel_t: sequential from 0 (INTERNAL, SINGLE,
 * MULTIPLE, HOSTBRIDGE, NODE, METAXLINK, SYSTEM, ETH, UNDEFINED). */
#define MXSML_TOPOLOGY_METAXLINK 5u
mxsml_rc mxSmlGetDeviceTopology(unsigned int deviceId1, unsigned int deviceId2,
                                unsigned int *topoInfo);
mxsml_rc mxSmlGetBoardPowerInfo(unsigned int deviceId, unsigned int *size,
                                mxSmlBoardWayElectricInfo_t *ways);
mxsml_rc mxSmlGetSingleGpuProcess(unsigned int deviceId, unsigned int *count,
                                  mxSmlProcessInfo_t *rows);
mxsml_rc mxSmlGetSingleGpuProcess_v2(unsigned int deviceId, unsigned int *count,
                                     mxSmlProcessInfo_v2_t *rows);
mxsml_rc mxSmlGetSingleGpuProcess_v3(unsigned int deviceId, unsigned int *count,
                                     mxSmlProcessInfo_v3_t *rows);
mxsml_rc mxSmlGetSgpuToggle(unsigned int deviceId, unsigned int *toggle);
unsigned int mxSmlGetSgpuCount(unsigned int deviceId);
mxsml_rc mxSmlGetSgpuInfo(unsigned int deviceId, unsigned int sgpuId, mxSmlSgpuInfo_t *info);
mxsml_rc mxSmlGetSgpuUsage(unsigned int deviceId, unsigned int sgpuId, int *usage);
mxsml_rc mxSmlGetSgpuMemory(unsigned int deviceId, unsigned int sgpuId,
                            mxSmlSgpuMemoryInfo_t *memory);
mxsml_rc mxSmlGetSgpuAlias(unsigned int deviceId, unsigned int sgpuId, char *alias,
                           unsigned int *size);
/* Newer libraries: the id MetaX's device plugin registered the sGPU under with the kubelet. */
mxsml_rc mxSmlGetSgpuAnnotationsId(unsigned int deviceId, unsigned int sgpuId, char *id,
                                   unsigned int *size);
const char *mxSmlGetErrorString(mxsml_rc rc);

#endif
