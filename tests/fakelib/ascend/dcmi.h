/*
 * The part of Huawei's DCMI (libdcmi.so) the ascend backend calls, declared by this project from
 * the facts of the public dcmi_interface_api.h (Ascend/mind-cluster,
 * component/ascend-common/devmanager/dcmi/; the trimmed copy in Syllo/nvtop include/ascend/) and
 * Huawei's API reference. Not a copy of that header: only the structs and entry points used,
 * with the field names and order the ABI fixes. The fake library implements these, and the
 * tests compare every struct here with vendors/_ascend_lib.py's ctypes layouts.
 */
#ifndef DEVICEMANAGER_FAKE_DCMI_H
#define DEVICEMANAGER_FAKE_DCMI_H

#define DCMI_MAX_CHIP_NAME_LEN 32
#define DCMI_DIE_ID_COUNT 5
#define DCMI_VDEV_RES_NAME_LEN 16
#define DCMI_VDEV_FOR_RESERVE 32
#define DCMI_VDEV_SIZE 20
#define DCMI_SOC_SPLIT_MAX 32

#define DCMI_MAIN_CMD_VDEV_MNG 52
#define DCMI_VDEV_SUB_RESOURCE 0
#define DCMI_VDEV_SUB_TOTAL 1
#define DCMI_VDEV_SUB_ACTIVITY 5

/* Return codes. */
#define DCMI_OK 0
#define DCMI_ERR_INVALID_PARAMETER (-8001)
#define DCMI_ERR_INVALID_DEVICE_ID (-8007)
#define DCMI_ERR_DEVICE_NOT_EXIST (-8008)
#define DCMI_ERR_NOT_SUPPORT (-8255)

struct dcmi_chip_info {
    unsigned char chip_type[DCMI_MAX_CHIP_NAME_LEN];
    unsigned char chip_name[DCMI_MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[DCMI_MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};

struct dcmi_pcie_info_all {
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int deviceid;
    unsigned int subdeviceid;
    int domain;
    unsigned int bdf_busid;
    unsigned int bdf_deviceid;
    unsigned int bdf_funcid;
    unsigned char reserve[32];
};

/* How two devices are joined (dcmi_get_topo_info_by_device_id), as the newer header numbers it;
 * Huawei's API reference for older drivers ends the list at PIX 5 with BUTT 6 (unknown). */
enum {
    DCMI_TOPO_TYPE_SELF = 0,
    DCMI_TOPO_TYPE_SYS,
    DCMI_TOPO_TYPE_PHB,
    DCMI_TOPO_TYPE_HCCS,
    DCMI_TOPO_TYPE_PXB,
    DCMI_TOPO_TYPE_PIX,
    DCMI_TOPO_TYPE_SIO,
    DCMI_TOPO_TYPE_HCCS_SW,
    DCMI_TOPO_TYPE_UB,
    DCMI_TOPO_TYPE_BUTT
};

struct dcmi_die_id {
    unsigned int soc_die[DCMI_DIE_ID_COUNT];
};

/* ECC of one memory (enum dcmi_device_type: DDR 0, SRAM 1, HBM 2, NPU 3). */
struct dcmi_ecc_info {
    int enable_flag;
    unsigned int single_bit_error_cnt;
    unsigned int double_bit_error_cnt;
    unsigned int total_single_bit_error_cnt;
    unsigned int total_double_bit_error_cnt;
    unsigned int single_bit_isolated_pages_cnt;
    unsigned int double_bit_isolated_pages_cnt;
    unsigned int single_bit_next_isolated_pages_cnt;
    unsigned int double_bit_next_isolated_pages_cnt;
};

#define DCMI_DEVICE_TYPE_DDR 0
#define DCMI_DEVICE_TYPE_HBM 2
/* enum dcmi_freq_type, MHz */
#define DCMI_FREQ_DDR 1
#define DCMI_FREQ_HBM 6
#define DCMI_FREQ_AICORE_CURRENT 7

struct dcmi_hbm_info {
    unsigned long long memory_size; /* MB */
    unsigned int freq;
    unsigned long long memory_usage; /* MB */
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;      /* MB */
    unsigned long long memory_available; /* MB */
    unsigned int freq;
    unsigned long hugepagesize; /* KB */
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage; /* bytes */
};

struct dcmi_base_resource {
    unsigned long long token;
    unsigned long long token_max;
    unsigned long long task_timeout;
    unsigned int vfg_id;
    unsigned char vip_mode;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE - 1];
};

struct dcmi_computing_resource {
    float aic;
    float aiv;
    unsigned short dsa;
    unsigned short rtsq;
    unsigned short acsq;
    unsigned short cdqm;
    unsigned short c_core;
    unsigned short ffts;
    unsigned short sdma;
    unsigned short pcie_dma;
    unsigned long long memory_size; /* MB */
    unsigned int event_id;
    unsigned int notify_id;
    unsigned int stream_id;
    unsigned int model_id;
    unsigned short topic_schedule_aicpu;
    unsigned short host_ctrl_cpu;
    unsigned short host_aicpu;
    unsigned short device_aicpu;
    unsigned short topic_ctrl_cpu_slot;
    unsigned int vdev_aicore_utilization; /* percent */
    unsigned long long vdev_memory_total; /* KB */
    unsigned long long vdev_memory_free;  /* KB */
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE - DCMI_VDEV_SIZE];
};

struct dcmi_media_resource {
    float jpegd;
    float jpege;
    float vpc;
    float vdec;
    float pngd;
    float venc;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE];
};

struct dcmi_vdev_query_info {
    char name[DCMI_VDEV_RES_NAME_LEN];
    unsigned int status;
    unsigned int is_container_used;
    unsigned int vfid;
    unsigned int vfg_id;
    unsigned long long container_id;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

struct dcmi_vdev_query_stru {
    unsigned int vdev_id;
    struct dcmi_vdev_query_info query_info;
};

struct dcmi_soc_total_resource {
    unsigned int vdev_num;
    unsigned int vdev_id[DCMI_SOC_SPLIT_MAX];
    unsigned int vfg_num;
    unsigned int vfg_bitmap;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

int dcmi_init(void);
int dcmi_get_driver_version(char *driver_ver, unsigned int len);
int dcmi_get_card_list(int *card_num, int *card_list, int list_len);
int dcmi_get_device_num_in_card(int card_id, int *device_num);
int dcmi_get_device_type(int card_id, int device_id, int *device_type);
int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id);
int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid);
int dcmi_get_device_die_v2(int card_id, int device_id, int input_type, struct dcmi_die_id *die_id);
int dcmi_get_device_die(int card_id, int device_id, struct dcmi_die_id *die_id);
int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info);
int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info);
int dcmi_get_device_memory_info_v3(int card_id, int device_id,
                                   struct dcmi_get_memory_info_stru *memory_info);
int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type,
                                     unsigned int *utilization_rate);
int dcmi_get_device_temperature(int card_id, int device_id, int *temperature);
int dcmi_get_device_power_info(int card_id, int device_id, int *power);
int dcmi_get_device_health(int card_id, int device_id, unsigned int *health);
int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count,
                                 unsigned int *error_code_list, unsigned int list_len);
int dcmi_get_device_ecc_info(int card_id, int device_id, int input_type,
                             struct dcmi_ecc_info *device_ecc_info);
int dcmi_get_device_frequency(int card_id, int device_id, int input_type, unsigned int *frequency);
int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *proc_info,
                                  int *proc_num);
int dcmi_get_device_info(int card_id, int device_id, int main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size);
int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info);
int dcmi_get_topo_info_by_device_id(int card_id1, int device_id1, int card_id2, int device_id2,
                                    int *topo_type);

#endif
