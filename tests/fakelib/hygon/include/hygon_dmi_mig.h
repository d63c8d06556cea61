/*
 * Our declarations of the part of libhydmi_mig.so (Hygon's multi-instance API) that the hygon
 * backend calls, written from the facts of Hygon's public dmi_mig.h (HYGON-AI/hcu-dcgm,
 * pkg/dcgm/include/, Apache-2.0) and GPUStack's hardware notes. The library exports NVML's
 * symbol names with NVML's return codes but its own struct layouts (the PCI struct below is
 * not NVML's); it has no UUID query and no init. nvmlDeviceGetMemoryInfo and
 * nvmlDeviceGetUtilizationRates are exported though the public header does not declare them;
 * NVML's signatures are assumed for both, as GPUStack's binding does.
 */
#ifndef HYGON_DMI_MIG_H
#define HYGON_DMI_MIG_H

typedef enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

typedef struct dmiDevice_struct *nvmlDevice_t;

/* Hygon's PCI struct: four numbers, then the bus id (NVML's puts the string first). */
typedef struct nvmlPciInfo_st {
    unsigned int pci_domain;
    unsigned int pci_bus;
    unsigned int pci_device;
    unsigned int pci_function;
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo;

typedef struct nvmlMemory_st {
    unsigned long long total; /* bytes */
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu; /* percent */
    unsigned int memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlGetSystemMigMode(unsigned int *current_mode, unsigned int *pending_mode);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *device_count);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pci_bus_id, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo *pci);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *mig_device);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *gpu_instance_id);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                            unsigned int *compute_instance_id);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);

#endif
