/*
 * Our declarations of the part of ROCm SMI (librocm_smi64) the fake implements and the amd
 * backend's fallback calls, written by this project from the facts of the public header
 * ROCm/rocm_smi_lib include/rocm_smi/rocm_smi.h (NCSA). Not a copy. The struct is asserted
 * against vendors/_rocm_smi_lib.py's ctypes declaration by tests/vendors/test_amd_kit.py.
 */
#ifndef DEVICEMANAGER_ROCM_SMI_DECL_H
#define DEVICEMANAGER_ROCM_SMI_DECL_H

#include <stdint.h>

typedef uint32_t rsmi_status_t;
#define RSMI_STATUS_SUCCESS 0u
#define RSMI_STATUS_INVALID_ARGS 1u
#define RSMI_STATUS_NOT_SUPPORTED 2u
#define RSMI_STATUS_PERMISSION 4u
#define RSMI_STATUS_INIT_ERROR 8u
#define RSMI_STATUS_NOT_FOUND 10u
#define RSMI_STATUS_INSUFFICIENT_SIZE 11u

#define CU_OCCUPANCY_INVALID 0xFFFFFFFFu

typedef struct {
    uint32_t process_id;
    uint32_t pasid;
    uint64_t vram_usage;   /* bytes */
    uint64_t sdma_usage;   /* microseconds */
    uint32_t cu_occupancy; /* percent of the device's compute units */
} rsmi_process_info_t;

rsmi_status_t rsmi_init(uint64_t init_flags);
rsmi_status_t rsmi_shut_down(void);
rsmi_status_t rsmi_num_monitor_devices(uint32_t *num_devices);
rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid);
rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items);
rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices,
                                            uint32_t *num_devices);
rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv_ind,
                                                      rsmi_process_info_t *proc);

#endif
