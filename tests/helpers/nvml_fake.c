/* A stand-in for libnvidia-ml.so.1 for the GPU tests: the NVML entry points enginespec calls,
 * answering from a description file named by ENGINESPEC_TEST_NVML_HOST, read again on every
 * nvmlDeviceGetCount_v2 (so a test can change the host between polls). Lines, tab-separated:
 *
 *   gpu       UUID  BUS-ID  NAME  TOTAL  USED          (BUS-ID as NVML writes it: 00000000:01:00.0)
 *   mig       GPU-INDEX  SLOT  UUID  NAME  TOTAL  USED (a MIG instance; its GPU is in MIG mode)
 *   compute   REF  PID  BYTES|na                       (REF: a GPU index, or INDEX/SLOT)
 *   graphics  REF  PID  BYTES|na
 *   fail      REF  CODE                            (its process lists return NVML error CODE)
 *   power     REF  MILLIWATTS                      (nvmlDeviceGetPowerUsage; none: not supported)
 *   energy    REF  MILLIJOULES                     (nvmlDeviceGetTotalEnergyConsumption; likewise)
 *   util      REF  PID  SM%  [TIMESTAMP]           (a nvmlDeviceGetProcessUtilization sample; the
 *                                                  timestamp, in microseconds, defaults to 1)
 *   fail-power  REF  CODE                          (those calls return NVML error CODE)
 *   fail-energy REF  CODE
 *   fail-util   REF  CODE
 * A device with no util line answers NVML_ERROR_NOT_FOUND (no samples), as NVML does for an idle
 * GPU; only samples newer than the caller's lastSeenTimeStamp are returned.
 *
 * Which process-list entry points exist, and the struct they fill, is chosen at build time, as
 * drivers differ (nvml.h; nvitop's libnvml.py explains the R535 case):
 *   -DPROC_API=1   only nvmlDeviceGet*RunningProcesses (v1 struct: pid, bytes)
 *   -DPROC_API=2   also the _v2 functions (v2 struct: pid, bytes, GPU and compute instance ids)
 *   -DPROC_API=3   also _v3 filling the v2 struct, and nvmlDeviceGetRunningProcessDetailList
 *                  (released headers)
 *   -DPROC_API=35  _v3 filling the v3 struct (a confidential-computing field at the end), with
 *                  nvmlDeviceGetConfComputeMemSizeInfo and no detail list (the first R535 drivers)
 * ENGINESPEC_TEST_NVML_INIT=N makes nvmlInit_v2 return N (9: driver not loaded).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PROC_API
#define PROC_API 3
#endif

#define MAX_DEVICES 16
#define MAX_PROCS 64
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL

typedef struct {
    unsigned int pid;
    unsigned long long bytes;
} proc_t;

typedef struct device {
    char uuid[96], bus[32], name[96];
    unsigned long long total, used;
    int slot; /* -1: a GPU; else a MIG instance's slot */
    struct device *migs[8];
    proc_t compute[MAX_PROCS], graphics[MAX_PROCS];
    unsigned int n_compute, n_graphics;
    int fail;
    int has_power, has_energy, fail_power, fail_energy, fail_util;
    unsigned int power_mw;
    unsigned long long energy_mj;
    struct {
        unsigned int pid, sm;
        unsigned long long stamp;
    } util[MAX_PROCS];
    unsigned int n_util;
} device_t;

static device_t devices[MAX_DEVICES * 9];
static device_t *gpus[MAX_DEVICES];
static unsigned int n_gpus, n_devices;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} v3_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
typedef struct {
    unsigned long long total, free, used;
} memory_t;

static device_t *by_ref(const char *ref) {
    char *slash;
    unsigned long index = strtoul(ref, &slash, 10);
    if (index >= n_gpus) return NULL;
    if (*slash != '/') return gpus[index];
    unsigned long slot = strtoul(slash + 1, NULL, 10);
    return slot < 8 ? gpus[index]->migs[slot] : NULL;
}

static void load(void) {
    const char *path = getenv("ENGINESPEC_TEST_NVML_HOST");
    char line[512];
    n_gpus = n_devices = 0;
    memset(devices, 0, sizeof devices);
    memset(gpus, 0, sizeof gpus);
    FILE *file = path ? fopen(path, "r") : NULL;
    if (!file) return;
    while (fgets(line, sizeof line, file)) {
        char *field[8] = {0};
        int n = 0;
        line[strcspn(line, "\n")] = 0;
        for (char *part = strtok(line, "\t"); part && n < 8; part = strtok(NULL, "\t")) field[n++] = part;
        if (n == 6 && !strcmp(field[0], "gpu") && n_gpus < MAX_DEVICES) {
            device_t *d = &devices[n_devices++];
            snprintf(d->uuid, sizeof d->uuid, "%s", field[1]);
            snprintf(d->bus, sizeof d->bus, "%s", field[2]);
            snprintf(d->name, sizeof d->name, "%s", field[3]);
            d->total = strtoull(field[4], NULL, 10);
            d->used = strtoull(field[5], NULL, 10);
            d->slot = -1;
            gpus[n_gpus++] = d;
        } else if (n == 7 && !strcmp(field[0], "mig")) {
            unsigned long index = strtoul(field[1], NULL, 10), slot = strtoul(field[2], NULL, 10);
            if (index >= n_gpus || slot >= 8) continue;
            device_t *d = &devices[n_devices++];
            snprintf(d->uuid, sizeof d->uuid, "%s", field[3]);
            snprintf(d->bus, sizeof d->bus, "%s", gpus[index]->bus);
            snprintf(d->name, sizeof d->name, "%s", field[4]);
            d->total = strtoull(field[5], NULL, 10);
            d->used = strtoull(field[6], NULL, 10);
            d->slot = (int)slot;
            gpus[index]->migs[slot] = d;
        } else if (n == 3 && !strcmp(field[0], "fail")) {
            device_t *d = by_ref(field[1]);
            if (d) d->fail = atoi(field[2]);
        } else if (n == 3 && !strcmp(field[0], "power")) {
            device_t *d = by_ref(field[1]);
            if (d) d->has_power = 1, d->power_mw = (unsigned int)strtoul(field[2], NULL, 10);
        } else if (n == 3 && !strcmp(field[0], "energy")) {
            device_t *d = by_ref(field[1]);
            if (d) d->has_energy = 1, d->energy_mj = strtoull(field[2], NULL, 10);
        } else if (n == 3 && !strncmp(field[0], "fail-", 5)) {
            device_t *d = by_ref(field[1]);
            if (!d) continue;
            if (!strcmp(field[0], "fail-power")) d->fail_power = atoi(field[2]);
            if (!strcmp(field[0], "fail-energy")) d->fail_energy = atoi(field[2]);
            if (!strcmp(field[0], "fail-util")) d->fail_util = atoi(field[2]);
        } else if ((n == 4 || n == 5) && !strcmp(field[0], "util")) {
            device_t *d = by_ref(field[1]);
            if (!d || d->n_util >= MAX_PROCS) continue;
            d->util[d->n_util].pid = (unsigned int)strtoul(field[2], NULL, 10);
            d->util[d->n_util].sm = (unsigned int)strtoul(field[3], NULL, 10);
            d->util[d->n_util].stamp = n == 5 ? strtoull(field[4], NULL, 10) : 1;
            d->n_util++;
        } else if (n == 4 && (!strcmp(field[0], "compute") || !strcmp(field[0], "graphics"))) {
            device_t *d = by_ref(field[1]);
            if (!d) continue;
            int compute = !strcmp(field[0], "compute");
            proc_t *list = compute ? d->compute : d->graphics;
            unsigned int *count = compute ? &d->n_compute : &d->n_graphics;
            if (*count >= MAX_PROCS) continue;
            list[*count].pid = (unsigned int)strtoul(field[2], NULL, 10);
            list[*count].bytes = strcmp(field[3], "na") ? strtoull(field[3], NULL, 10) : NOT_AVAILABLE;
            (*count)++;
        }
    }
    fclose(file);
}

int nvmlInit_v2(void) {
    const char *fail = getenv("ENGINESPEC_TEST_NVML_INIT");
    if (fail) return atoi(fail);
    load();
    return 0;
}
int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetCount_v2(unsigned int *count) {
    load();
    *count = n_gpus;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, device_t **handle) {
    if (index >= n_gpus) return 2;
    *handle = gpus[index];
    return 0;
}

static int text(const char *value, char *buffer, unsigned int length) {
    if (strlen(value) + 1 > length) return 7;
    strcpy(buffer, value);
    return 0;
}
int nvmlDeviceGetUUID(device_t *d, char *buffer, unsigned int length) { return text(d->uuid, buffer, length); }
int nvmlDeviceGetName(device_t *d, char *buffer, unsigned int length) { return text(d->name, buffer, length); }

int nvmlDeviceGetPciInfo_v3(device_t *d, pci_t *pci) {
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->bus);
    return 0;
}

int nvmlDeviceGetMemoryInfo(device_t *d, memory_t *memory) {
    memory->total = d->total;
    memory->used = d->used;
    memory->free = d->total - d->used;
    return 0;
}

int nvmlDeviceGetMigMode(device_t *d, unsigned int *current, unsigned int *pending) {
    if (d->slot >= 0) return 2;
    int mig = 0;
    for (int i = 0; i < 8; i++) mig |= d->migs[i] != NULL;
    if (!mig) return 3; /* not supported: a GPU without MIG */
    *current = *pending = 1;
    return 0;
}

int nvmlDeviceGetMaxMigDeviceCount(device_t *d, unsigned int *count) {
    *count = d->slot < 0 ? 8 : 0;
    return 0;
}

int nvmlDeviceGetMigDeviceHandleByIndex(device_t *d, unsigned int index, device_t **handle) {
    if (d->slot >= 0 || index >= 8) return 2;
    if (!d->migs[index]) return 6; /* not found: an empty slot */
    *handle = d->migs[index];
    return 0;
}

/* Fills the caller's array in the struct of `version` (1, 2 or 3 with the CC field). */
static int fill(const proc_t *list, unsigned int n, unsigned int *count, void *infos, int version, int slot,
                int fail) {
    if (fail) return fail;
    if (*count < n) {
        *count = n;
        return n == 0 ? 0 : 7;
    }
    for (unsigned int i = 0; i < n; i++) {
        unsigned int instance = slot < 0 ? 0xFFFFFFFFu : (unsigned int)slot;
        if (version == 1) {
            ((v1_t *)infos)[i] = (v1_t){list[i].pid, list[i].bytes};
        } else if (version == 2) {
            ((v2_t *)infos)[i] = (v2_t){list[i].pid, list[i].bytes, instance, instance};
        } else {
            ((v3_t *)infos)[i] = (v3_t){list[i].pid, list[i].bytes, instance, instance, 0};
        }
    }
    *count = n;
    return 0;
}

#define LISTS(kind, field, counter)                                                      \
    int nvmlDeviceGet##kind##RunningProcesses(device_t *d, unsigned int *c, void *i) {   \
        return fill(d->field, d->counter, c, i, 1, d->slot, d->fail);                             \
    }                                                                                    \
    LISTS_V2(kind, field, counter)                                                       \
    LISTS_V3(kind, field, counter)

#if PROC_API >= 2
#define LISTS_V2(kind, field, counter)                                                   \
    int nvmlDeviceGet##kind##RunningProcesses_v2(device_t *d, unsigned int *c, void *i) { \
        return fill(d->field, d->counter, c, i, 2, d->slot, d->fail);                             \
    }
#else
#define LISTS_V2(kind, field, counter)
#endif

#if PROC_API >= 3
#define V3_STRUCT (PROC_API == 35 ? 3 : 2)
#define LISTS_V3(kind, field, counter)                                                   \
    int nvmlDeviceGet##kind##RunningProcesses_v3(device_t *d, unsigned int *c, void *i) { \
        return fill(d->field, d->counter, c, i, V3_STRUCT, d->slot, d->fail);                     \
    }
int nvmlDeviceGetConfComputeMemSizeInfo(device_t *d, void *info) {
    (void)d;
    (void)info;
    return 3;
}
#else
#define LISTS_V3(kind, field, counter)
#endif

#if PROC_API == 3
int nvmlDeviceGetRunningProcessDetailList(device_t *d, void *list) {
    (void)d;
    (void)list;
    return 3;
}
#endif

LISTS(Compute, compute, n_compute)
LISTS(Graphics, graphics, n_graphics)

int nvmlDeviceGetPowerUsage(device_t *d, unsigned int *power) {
    if (d->fail_power) return d->fail_power;
    if (!d->has_power) return 3;
    *power = d->power_mw;
    return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(device_t *d, unsigned long long *energy) {
    if (d->fail_energy) return d->fail_energy;
    if (!d->has_energy) return 3;
    *energy = d->energy_mj;
    return 0;
}

/* nvmlProcessUtilizationSample_t (nvml.h) */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} util_t;

int nvmlDeviceGetProcessUtilization(device_t *d, util_t *samples, unsigned int *count, unsigned long long since) {
    if (d->fail_util) return d->fail_util;
    unsigned int n = 0;
    for (unsigned int i = 0; i < d->n_util; i++) n += d->util[i].stamp > since;
    if (n == 0) return 6; /* NVML_ERROR_NOT_FOUND: no samples since `since` */
    if (!samples || *count < n) {
        *count = n;
        return 7;
    }
    n = 0;
    for (unsigned int i = 0; i < d->n_util; i++) {
        if (d->util[i].stamp <= since) continue;
        samples[n++] = (util_t){d->util[i].pid, d->util[i].stamp, d->util[i].sm, 0, 0, 0};
    }
    *count = n;
    return 0;
}
