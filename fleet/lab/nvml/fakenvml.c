/*
 * fakenvml: the lab's stand-in for libnvidia-ml.so.1 (fleet/lab/nvml). Built with gcc at lab
 * build time and shipped inside the fake nvidia-driver-NNN packages.
 *
 * It models three things the real stack has:
 *   library   /usr/share/gpusim/driver.conf ($GPUSIM_DRIVER_FILE): installed by the package,
 *             changes the moment the package is installed (driver_version, cuda_driver_version).
 *   module    /proc/driver/nvidia/version ($GPUSIM_PROC_VERSION): the *loaded kernel module*;
 *             the lab writes it at boot. Missing -> nvmlInit fails with DRIVER_NOT_LOADED (9);
 *             a version other than the library's -> LIB_RM_VERSION_MISMATCH (18), as after an
 *             upgrade without a reboot.
 *   state     /var/lib/gpusim/state ($GPUSIM_STATE): per host key=value, the GPU model and any
 *             injected fault:  gpu.count=8   gpu*.name=NVIDIA H100 80GB HBM3   gpu0.ecc.volatile.sbe=14
 *             gpu1.error.nvmlDeviceGetTemperature=15   gpu1.error.*=15 (lost)   error.nvmlInit=9
 *             gpu0.ecc.volatile.sbe.per_hour=120 + gpu0.ecc.growth_since=<epoch> (steady growth)
 *   work      /run/gpusim/work.d ($GPUSIM_WORK_DIR): a file per process doing "GPU work" (the
 *             lab's model server and benchmark, fleet/lab/perf.py), key=value: updated=<epoch s>
 *             util.gpu, util.memory (% over the last sample period), pcie.rx_kbps, pcie.tx_kbps
 *             (per GPU), closed=1 + window_s once the process is done (faded out over that
 *             window). Utilization and PCIe throughput are the sum over the files updated in
 *             the last second plus any state value (an injected `busy` fault), capped at 100 %:
 *             the GPUs look busy exactly while the lab's workload runs kernels on them.
 * All files are re-read when their mtime changes. A function not implemented here is simply not
 * exported, so pynvml raises NVMLError_FunctionNotFound (it resolves symbols lazily).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <dirent.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18
#define NVML_ERROR_UNKNOWN 999

#define MAX_GPUS 64
#define MAX_KV 2048
#define EXPORT __attribute__((visibility("default")))

struct gpu { int index; };
typedef struct gpu *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

static struct gpu g_gpus[MAX_GPUS];
static char *g_keys[MAX_KV], *g_vals[MAX_KV];
static int g_nkv;
static int g_refcount;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static time_t g_mt_state = -1, g_mt_driver = -1;
static long g_mtn_state = -1, g_mtn_driver = -1;

static const char *state_path(void) {
    const char *p = getenv("GPUSIM_STATE");
    return p && *p ? p : "/var/lib/gpusim/state";
}
static const char *driver_path(void) {
    const char *p = getenv("GPUSIM_DRIVER_FILE");
    return p && *p ? p : "/usr/share/gpusim/driver.conf";
}

static void kv_clear(void) {
    for (int i = 0; i < g_nkv; i++) { free(g_keys[i]); free(g_vals[i]); }
    g_nkv = 0;
}
static void kv_set(const char *k, const char *v) {
    for (int i = 0; i < g_nkv; i++)
        if (!strcmp(g_keys[i], k)) { free(g_vals[i]); g_vals[i] = strdup(v); return; }
    if (g_nkv < MAX_KV) { g_keys[g_nkv] = strdup(k); g_vals[g_nkv] = strdup(v); g_nkv++; }
}
static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
    return s;
}
static int kv_load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) continue;
        *eq = 0;
        kv_set(trim(s), trim(eq + 1));
    }
    fclose(f);
    return 0;
}
static int g_have_driver;
/* re-read both files if either changed; caller holds g_lock */
static void reload(void) {
    struct stat a, b;
    int ha = stat(driver_path(), &a) == 0, hb = stat(state_path(), &b) == 0;
    time_t ma = ha ? a.st_mtim.tv_sec : 0, mb = hb ? b.st_mtim.tv_sec : 0;
    long na = ha ? a.st_mtim.tv_nsec : 0, nb = hb ? b.st_mtim.tv_nsec : 0;
    if (ma == g_mt_driver && na == g_mtn_driver && mb == g_mt_state && nb == g_mtn_state) return;
    g_mt_driver = ma; g_mtn_driver = na; g_mt_state = mb; g_mtn_state = nb;
    kv_clear();
    g_have_driver = kv_load(driver_path()) == 0;
    kv_load(state_path());
}
static const char *kv_get(const char *k) {
    for (int i = 0; i < g_nkv; i++) if (!strcmp(g_keys[i], k)) return g_vals[i];
    return NULL;
}
static const char *gkey(int gi, const char *suffix, char *buf, size_t n) {
    snprintf(buf, n, "gpu%d.%s", gi, suffix);
    return buf;
}
static unsigned long long gnum(int gi, const char *suffix, unsigned long long dflt) {
    char k[256];
    const char *v = kv_get(gkey(gi, suffix, k, sizeof k));
    if (!v) { snprintf(k, sizeof k, "gpu*.%s", suffix); v = kv_get(k); }
    return v ? strtoull(v, NULL, 0) : dflt;
}
static const char *gstr(int gi, const char *suffix, const char *dflt) {
    char k[256];
    const char *v = kv_get(gkey(gi, suffix, k, sizeof k));
    if (!v) { snprintf(k, sizeof k, "gpu*.%s", suffix); v = kv_get(k); }
    return v ? v : dflt;
}
static int gpu_count(void) {
    const char *v = kv_get("gpu.count");
    int n = v ? atoi(v) : 8;
    if (n < 0) n = 0;
    if (n > MAX_GPUS) n = MAX_GPUS;
    return n;
}
/* global injected error for function fn (key error.<fn>) */
static int inj_global(const char *fn) {
    char k[256];
    snprintf(k, sizeof k, "error.%s", fn);
    const char *v = kv_get(k);
    return v ? atoi(v) : 0;
}
static int inj_gpu(int gi, const char *fn) {
    char k[256];
    snprintf(k, sizeof k, "gpu%d.error.%s", gi, fn);
    const char *v = kv_get(k);
    if (!v) { snprintf(k, sizeof k, "gpu%d.error.*", gi); v = kv_get(k); }
    if (v) return atoi(v);
    return inj_global(fn);
}
static int copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

/* common prologue for device getters: lock, check init, validate handle, error injection */
#define DEV_PROLOGUE(fnname)                                                       \
    int gi; int _rc;                                                               \
    pthread_mutex_lock(&g_lock);                                                   \
    if (!g_refcount) { pthread_mutex_unlock(&g_lock); return NVML_ERROR_UNINITIALIZED; } \
    reload();                                                                      \
    if (!dev || dev < g_gpus || dev >= g_gpus + MAX_GPUS || dev->index >= gpu_count()) \
        { pthread_mutex_unlock(&g_lock); return NVML_ERROR_INVALID_ARGUMENT; }     \
    gi = dev->index;                                                               \
    if ((_rc = inj_gpu(gi, fnname))) { pthread_mutex_unlock(&g_lock); return _rc; }
#define UNLOCK_RETURN(x) do { int _r = (x); pthread_mutex_unlock(&g_lock); return _r; } while (0)

#define SYS_PROLOGUE(fnname)                                                       \
    int _rc;                                                                       \
    pthread_mutex_lock(&g_lock);                                                   \
    if (!g_refcount) { pthread_mutex_unlock(&g_lock); return NVML_ERROR_UNINITIALIZED; } \
    reload();                                                                      \
    if ((_rc = inj_global(fnname))) { pthread_mutex_unlock(&g_lock); return _rc; }

/* ---------------- init / shutdown ---------------- */
static const char *proc_version_path(void) {
    const char *p = getenv("GPUSIM_PROC_VERSION");
    return p && *p ? p : "/proc/driver/nvidia/version";
}
/* version of the loaded kernel module, from the first line of /proc/driver/nvidia/version:
 * "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024" */
static int module_version(char *out, size_t n) {
    FILE *f = fopen(proc_version_path(), "r");
    if (!f) return -1;
    char line[512] = "";
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    if (!ok) return -1;
    char *p = strstr(line, "Kernel Module");
    if (!p) return -1;
    p += strlen("Kernel Module");
    while (*p == ' ' || *p == '\t') p++;
    size_t i = 0;
    while (p[i] && p[i] != ' ' && p[i] != '\t' && p[i] != '\n' && i + 1 < n) { out[i] = p[i]; i++; }
    out[i] = 0;
    return i ? 0 : -1;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    char mod[64];
    pthread_mutex_lock(&g_lock);
    g_mt_state = g_mt_driver = -1;  /* force reload */
    reload();
    int rc = inj_global("nvmlInit");
    const char *lib = kv_get("driver_version");
    if (!rc && !g_have_driver && !lib) rc = NVML_ERROR_DRIVER_NOT_LOADED;
    if (!rc && module_version(mod, sizeof mod) != 0) rc = NVML_ERROR_DRIVER_NOT_LOADED;
    if (!rc && lib && strcmp(mod, lib) != 0) rc = NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    if (!rc) {
        for (int i = 0; i < MAX_GPUS; i++) g_gpus[i].index = i;
        g_refcount++;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_refcount) UNLOCK_RETURN(NVML_ERROR_UNINITIALIZED);
    g_refcount--;
    UNLOCK_RETURN(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 20: return "Insufficient Memory";
    default: return "Unknown Error";
    }
}

/* ---------------- system ---------------- */
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    SYS_PROLOGUE("nvmlSystemGetDriverVersion");
    const char *v = kv_get("driver_version");
    UNLOCK_RETURN(copy_str(version, length, v ? v : "0.0"));
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    SYS_PROLOGUE("nvmlSystemGetNVMLVersion");
    const char *v = kv_get("nvml_version");
    char buf[96];
    if (!v) { const char *d = kv_get("driver_version"); snprintf(buf, sizeof buf, "12.%s", d ? d : "0"); v = buf; }
    UNLOCK_RETURN(copy_str(version, length, v));
}
static nvmlReturn_t cuda_ver(int *v, const char *fn) {
    SYS_PROLOGUE(fn);
    if (!v) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    const char *s = kv_get("cuda_driver_version");
    *v = s ? atoi(s) : 0;
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return cuda_ver(v, "nvmlSystemGetCudaDriverVersion"); }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return cuda_ver(v, "nvmlSystemGetCudaDriverVersion_v2"); }

/* ---------------- device enumeration ---------------- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    SYS_PROLOGUE("nvmlDeviceGetCount");
    if (!count) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *count = gpu_count();
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    SYS_PROLOGUE("nvmlDeviceGetHandleByIndex");
    if (!dev || index >= (unsigned)gpu_count()) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    int rc = inj_gpu(index, "nvmlDeviceGetHandleByIndex");
    if (rc) UNLOCK_RETURN(rc);
    *dev = &g_gpus[index];
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev) {
    return nvmlDeviceGetHandleByIndex_v2(index, dev);
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
    DEV_PROLOGUE("nvmlDeviceGetIndex");
    if (!index) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *index = gi;
    UNLOCK_RETURN(NVML_SUCCESS);
}

/* ---------------- identity ---------------- */
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length) {
    DEV_PROLOGUE("nvmlDeviceGetName");
    UNLOCK_RETURN(copy_str(name, length, gstr(gi, "name", "NVIDIA H100 80GB HBM3")));
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length) {
    DEV_PROLOGUE("nvmlDeviceGetUUID");
    char dflt[96], host[64] = "lab";
    gethostname(host, sizeof host - 1);
    unsigned h = 2166136261u;
    for (char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    snprintf(dflt, sizeof dflt, "GPU-%08x-0000-4000-8000-%012x", h, gi);
    UNLOCK_RETURN(copy_str(uuid, length, gstr(gi, "uuid", dflt)));
}
EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t dev, char *serial, unsigned int length) {
    DEV_PROLOGUE("nvmlDeviceGetSerial");
    char dflt[32];
    snprintf(dflt, sizeof dflt, "165000000%04d", gi);
    UNLOCK_RETURN(copy_str(serial, length, gstr(gi, "serial", dflt)));
}
static nvmlReturn_t pci_info(nvmlDevice_t dev, nvmlPciInfo_t *pci, const char *fn) {
    DEV_PROLOGUE(fn);
    if (!pci) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    static const unsigned busses[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
    pci->domain = gnum(gi, "pci.domain", 0);
    pci->bus = gnum(gi, "pci.bus", gi < 8 ? busses[gi] : 0x10u + (unsigned)gi);
    pci->device = gnum(gi, "pci.device", 0);
    pci->pciDeviceId = gnum(gi, "pci.device_id", 0x233010DE);
    pci->pciSubSystemId = gnum(gi, "pci.subsystem_id", 0x16C110DE);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci) { return pci_info(dev, pci, "nvmlDeviceGetPciInfo"); }
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t dev, nvmlPciInfo_t *pci) { return pci_info(dev, pci, "nvmlDeviceGetPciInfo"); }
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t dev, nvmlPciInfo_t *pci) { return pci_info(dev, pci, "nvmlDeviceGetPciInfo"); }

/* ---------------- simple unsigned-int getters ---------------- */
#define UINT_GETTER(fn, key, dflt)                                      \
    EXPORT nvmlReturn_t fn(nvmlDevice_t dev, unsigned int *out) {       \
        DEV_PROLOGUE(#fn);                                              \
        if (!out) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);           \
        *out = (unsigned int)gnum(gi, key, dflt);                       \
        UNLOCK_RETURN(NVML_SUCCESS);                                    \
    }
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, "pcie.gen.curr", 5)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, "pcie.gen.max", 5)
UINT_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, "pcie.gen.gpumax", 5)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, "pcie.width.curr", 16)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, "pcie.width.max", 16)
UINT_GETTER(nvmlDeviceGetPowerUsage, "power.usage_mw", 72000)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, "power.limit_mw", 700000)
UINT_GETTER(nvmlDeviceGetPowerManagementLimit, "power.limit_mw", 700000)
UINT_GETTER(nvmlDeviceGetPersistenceMode, "persistence", 1)
UINT_GETTER(nvmlDeviceGetPcieReplayCounter, "pcie.replay", 0)
UINT_GETTER(nvmlDeviceGetArchitecture, "arch", 9)
UINT_GETTER(nvmlDeviceGetBrand, "brand", 2)
UINT_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, "power.default_limit_mw", 700000)

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int *temp) {
    DEV_PROLOGUE("nvmlDeviceGetTemperature");
    if (!temp || sensor != 0) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *temp = (unsigned int)gnum(gi, "temp", 34);
    UNLOCK_RETURN(NVML_SUCCESS);
}
/* the graphics clock a user setting holds the GPU to: `-lgc` locked max, else `-ac` graphics
 * (only when set on this GPU: default application clocks let the GPU boost); 0 = none */
static unsigned int user_clock_cap(int gi) {
    char k[64];
    unsigned int cap = (unsigned int)gnum(gi, "clock.locked.max", 0);
    snprintf(k, sizeof k, "gpu%d.clock.app.graphics", gi);
    const char *app = kv_get(k);
    unsigned int a = app ? (unsigned int)strtoul(app, NULL, 0) : 0;
    if (a && (!cap || a < cap)) cap = a;
    return cap;
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int *clock) {
    DEV_PROLOGUE("nvmlDeviceGetClockInfo");
    static const char *keys[] = {"clock.graphics", "clock.sm", "clock.mem", "clock.video"};
    static const unsigned dflt[] = {1980, 1980, 2619, 1545};
    if (!clock || type < 0 || type > 3) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *clock = (unsigned int)gnum(gi, keys[type], dflt[type]);
    if (type <= 1) {  /* locked or application clocks hold graphics/SM clocks below their cap */
        unsigned int cap = user_clock_cap(gi);
        if (cap && *clock > cap) *clock = cap;
    }
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int type, unsigned int *clock) {
    DEV_PROLOGUE("nvmlDeviceGetMaxClockInfo");
    static const char *keys[] = {"clock.max.graphics", "clock.max.sm", "clock.max.mem", "clock.max.video"};
    static const unsigned dflt[] = {1980, 1980, 2619, 1545};
    if (!clock || type < 0 || type > 3) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *clock = (unsigned int)gnum(gi, keys[type], dflt[type]);
    UNLOCK_RETURN(NVML_SUCCESS);
}
static nvmlReturn_t reasons(nvmlDevice_t dev, unsigned long long *r, const char *fn) {
    DEV_PROLOGUE(fn);
    if (!r) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *r = gnum(gi, "throttle_reasons", 0);
    {   /* nvmlClocksEventReasonApplicationsClocksSetting (0x2), alias UserDefinedClocks: also
         * what `-lgc` locked clocks show */
        unsigned int cap = user_clock_cap(gi);
        if (cap && cap < gnum(gi, "clock.max.graphics", 1980)) *r |= 0x2;
    }
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) { return reasons(d, r, "nvmlDeviceGetCurrentClocksThrottleReasons"); }
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) { return reasons(d, r, "nvmlDeviceGetCurrentClocksEventReasons"); }

/* ---------------- ECC / memory errors ---------------- */
/* counter value plus steady growth: <key>.per_hour since gpuN.ecc.growth_since (epoch seconds) */
static unsigned long long ecc_count(int gi, const char *key) {
    char k[128];
    unsigned long long base = gnum(gi, key, 0);
    snprintf(k, sizeof k, "%s.per_hour", key);
    unsigned long long rate = gnum(gi, k, 0);
    unsigned long long since = gnum(gi, "ecc.growth_since", 0);
    time_t now = time(NULL);
    if (rate && since && (unsigned long long)now > since)
        base += rate * ((unsigned long long)now - since) / 3600ULL;
    return base;
}
static const char *ecc_key(int errType, int counterType, char *buf, size_t n) {
    snprintf(buf, n, "ecc.%s.%s", counterType ? "aggregate" : "volatile", errType ? "dbe" : "sbe");
    return buf;
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int errType, int counterType, unsigned long long *count) {
    DEV_PROLOGUE("nvmlDeviceGetTotalEccErrors");
    char k[64];
    if (!count || errType < 0 || errType > 1 || counterType < 0 || counterType > 1) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "ecc.enabled", 1)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    *count = ecc_count(gi, ecc_key(errType, counterType, k, sizeof k));
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t dev, int errType, int counterType, int loc, unsigned long long *count) {
    DEV_PROLOGUE("nvmlDeviceGetMemoryErrorCounter");
    char k[64], k2[96];
    if (!count || errType < 0 || errType > 1 || counterType < 0 || counterType > 1 || loc < 0 || loc > 7) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "ecc.enabled", 1)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    ecc_key(errType, counterType, k, sizeof k);
    snprintf(k2, sizeof k2, "%s.loc%d", k, loc);
    /* per-location key wins; device memory (loc 2) falls back to the total */
    *count = gnum(gi, k2, loc == 2 ? ecc_count(gi, k) : 0);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, int *current, int *pending) {
    DEV_PROLOGUE("nvmlDeviceGetEccMode");
    if (!current || !pending) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *current = (int)gnum(gi, "ecc.enabled", 1);
    *pending = (int)gnum(gi, "ecc.pending", *current);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc, unsigned int *pending, unsigned int *failure) {
    DEV_PROLOGUE("nvmlDeviceGetRemappedRows");
    if (!corr || !unc || !pending || !failure) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *corr = gnum(gi, "remapped.correctable", 0);
    *unc = gnum(gi, "remapped.uncorrectable", 0);
    *pending = gnum(gi, "remapped.pending", 0);
    *failure = gnum(gi, "remapped.failure", 0);
    UNLOCK_RETURN(NVML_SUCCESS);
}

static unsigned long long procs_bytes(int gi);

/* ---------------- modes / memory ---------------- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending) {
    DEV_PROLOGUE("nvmlDeviceGetMigMode");
    if (!current || !pending) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *current = gnum(gi, "mig.current", 0);
    *pending = gnum(gi, "mig.pending", *current);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
    DEV_PROLOGUE("nvmlDeviceGetMemoryInfo");
    if (!mem) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    mem->total = gnum(gi, "memory.total", 85520809984ULL);
    mem->used = gnum(gi, "memory.used", 567279616ULL) + procs_bytes(gi);
    mem->free = mem->total > mem->used ? mem->total - mem->used : 0;
    UNLOCK_RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned int *minor) {
    DEV_PROLOGUE("nvmlDeviceGetMinorNumber");
    if (!minor) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *minor = (unsigned int)gnum(gi, "minor", (unsigned)gi);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t dev, char *part, unsigned int length) {
    DEV_PROLOGUE("nvmlDeviceGetBoardPartNumber");
    UNLOCK_RETURN(copy_str(part, length, gstr(gi, "part_number", "692-2G520-0200-000")));
}
EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t dev, char *v, unsigned int length) {
    DEV_PROLOGUE("nvmlDeviceGetVbiosVersion");
    UNLOCK_RETURN(copy_str(v, length, gstr(gi, "vbios", "96.00.89.00.01")));
}
/* H100/A100 SXM and L40S report no fan through NVML */
EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t dev, unsigned int *speed) {
    DEV_PROLOGUE("nvmlDeviceGetFanSpeed");
    if (!speed) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "fan.supported", 0)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    *speed = (unsigned int)gnum(gi, "fan.speed", 30);
    UNLOCK_RETURN(NVML_SUCCESS);
}

typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_v1_t;
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *t) {
    DEV_PROLOGUE("nvmlDeviceGetTemperatureV");
    if (!t || t->sensorType != 0) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    t->temperature = (int)gnum(gi, "temp", 34);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t dev, int which, unsigned int *temp) {
    DEV_PROLOGUE("nvmlDeviceGetTemperatureThreshold");
    /* 0 shutdown, 1 slowdown, 2 mem max, 3 gpu max */
    static const char *keys[] = {"temp.shutdown", "temp.slowdown", "temp.mem_max", "temp.gpu_max"};
    static const unsigned dflt[] = {92, 89, 95, 87};
    if (!temp || which < 0 || which > 3) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    *temp = (unsigned int)gnum(gi, keys[which], dflt[which]);
    UNLOCK_RETURN(NVML_SUCCESS);
}

typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem) {
    DEV_PROLOGUE("nvmlDeviceGetMemoryInfo_v2");
    if (!mem) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    mem->total = gnum(gi, "memory.total", 85520809984ULL);
    mem->reserved = gnum(gi, "memory.reserved", 333447168ULL);
    mem->used = gnum(gi, "memory.used", 567279616ULL) + procs_bytes(gi);
    mem->free = mem->total > mem->used + mem->reserved ? mem->total - mem->used - mem->reserved : 0;
    UNLOCK_RETURN(NVML_SUCCESS);
}

/* the lab workload's current figures: `key` summed over the work files updated in the last
 * second (a process that stopped or died leaves a stale file, which counts for nothing) */
#define WORK_FRESH_S 1.0
static const char *work_dir(void) {
    const char *p = getenv("GPUSIM_WORK_DIR");
    return p && *p ? p : "/run/gpusim/work.d";
}
static double work_sum(const char *key) {
    DIR *d = opendir(work_dir());
    if (!d) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = ts.tv_sec + ts.tv_nsec / 1e9, total = 0;
    size_t klen = strlen(key);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024], line[256];
        snprintf(path, sizeof path, "%s/%s", work_dir(), e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        double updated = -1, value = 0, window = 0;
        int closed = 0;
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "updated=", 8)) updated = strtod(line + 8, NULL);
            else if (!strncmp(line, "closed=", 7)) closed = atoi(line + 7);
            else if (!strncmp(line, "window_s=", 9)) window = strtod(line + 9, NULL);
            else if (!strncmp(line, key, klen) && line[klen] == '=') value = strtod(line + klen + 1, NULL);
        }
        fclose(f);
        double age = now - updated;
        if (updated < 0 || value <= 0 || age < -1) continue;
        if (closed && window > 0)  /* the process ended: its work leaves the average */
            total += age < window ? value * (1 - (age > 0 ? age : 0) / window) : 0;
        else if (age <= WORK_FRESH_S)
            total += value;
    }
    closedir(d);
    return total;
}

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u) {
    DEV_PROLOGUE("nvmlDeviceGetUtilizationRates");
    if (!u) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    double g = gnum(gi, "util.gpu", 0) + work_sum("util.gpu");
    double m = gnum(gi, "util.memory", 0) + work_sum("util.memory");
    u->gpu = (unsigned int)(g > 100 ? 100 : g + 0.5);
    u->memory = (unsigned int)(m > 100 ? 100 : m + 0.5);
    UNLOCK_RETURN(NVML_SUCCESS);
}

/* counter 0 = TX (bytes the GPU sent), 1 = RX; KB/s, like NVML's 20 ms window */
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t dev, int counter, unsigned int *value) {
    DEV_PROLOGUE("nvmlDeviceGetPcieThroughput");
    if (!value || counter < 0 || counter > 1) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    const char *key = counter ? "pcie.rx_kbps" : "pcie.tx_kbps";
    double v = gnum(gi, key, 0) + work_sum(key);
    *value = (unsigned int)(v + 0.5);
    UNLOCK_RETURN(NVML_SUCCESS);
}

/* retired pages: cause 0 = multiple single-bit, 1 = double-bit; addresses are synthetic */
static nvmlReturn_t retired(nvmlDevice_t dev, int cause, unsigned int *count,
                            unsigned long long *addrs, unsigned long long *times, const char *fn) {
    DEV_PROLOGUE(fn);
    if (!count || cause < 0 || cause > 1) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "retired.supported", 1)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    unsigned int n = (unsigned int)gnum(gi, cause ? "retired.dbe" : "retired.sbe", 0);
    if (*count < n || (!addrs && n)) { *count = n; UNLOCK_RETURN(NVML_ERROR_INSUFFICIENT_SIZE); }
    for (unsigned int i = 0; i < n; i++) {
        if (addrs) addrs[i] = 0x12bac1c000ULL + ((unsigned long long)cause << 24) + i * 0x1000ULL;
        if (times) times[i] = gnum(gi, "retired.since", 1700000000ULL) + i;
    }
    *count = n;
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t dev, int cause, unsigned int *count, unsigned long long *addrs) {
    return retired(dev, cause, count, addrs, NULL, "nvmlDeviceGetRetiredPages");
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t dev, int cause, unsigned int *count, unsigned long long *addrs, unsigned long long *times) {
    return retired(dev, cause, count, addrs, times, "nvmlDeviceGetRetiredPages_v2");
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending) {
    DEV_PROLOGUE("nvmlDeviceGetRetiredPagesPendingStatus");
    if (!pending) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "retired.supported", 1)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    *pending = (int)gnum(gi, "retired.pending", 0);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
    SYS_PROLOGUE("nvmlDeviceGetHandleByUUID");
    if (!uuid || !dev) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    pthread_mutex_unlock(&g_lock);
    unsigned int n = 0;
    nvmlDeviceGetCount_v2(&n);
    for (unsigned int i = 0; i < n; i++) {
        char buf[96];
        nvmlDevice_t d;
        if (nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS &&
            nvmlDeviceGetUUID(d, buf, sizeof buf) == NVML_SUCCESS && !strcmp(buf, uuid)) {
            *dev = d;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ---------------- processes, CPU affinity, NUMA node (for `fleet diagnose`) ----------------
 * gpuN.procs = pid:mib[:mib_per_s],...  compute processes and their GPU memory; a third field
 * makes that process's memory grow from gpuN.procs_since (epoch seconds): a leak.
 * gpuN.cpus = 0-7,16-23  the GPU's CPU affinity (default: every CPU of the machine).
 * gpuN.numa = 0          the GPU's NUMA node. */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;

/* caller holds g_lock; out may be NULL (count only) */
static int procs_of(int gi, nvmlProcessInfo_v2_t *out, int max) {
    const char *p = gstr(gi, "procs", "");
    unsigned long long since = gnum(gi, "procs_since", 0);
    unsigned long long now = (unsigned long long)time(NULL);
    int n = 0;
    while (*p && n < max) {
        char *end;
        unsigned long pid = strtoul(p, &end, 10);
        if (end == p) break;
        unsigned long long mib = 0, rate = 0;
        if (*end == ':') mib = strtoull(end + 1, &end, 10);
        if (*end == ':') rate = strtoull(end + 1, &end, 10);
        if (rate && since && now > since) mib += rate * (now - since);
        if (out) {
            out[n].pid = (unsigned int)pid;
            out[n].usedGpuMemory = mib << 20;
            out[n].gpuInstanceId = out[n].computeInstanceId = 0xFFFFFFFFu;
        }
        n++;
        while (*end && *end != ',') end++;
        p = *end ? end + 1 : end;
    }
    return n;
}
static unsigned long long procs_bytes(int gi) {
    nvmlProcessInfo_v2_t buf[64];
    int n = procs_of(gi, buf, 64);
    unsigned long long sum = 0;
    for (int i = 0; i < n; i++) sum += buf[i].usedGpuMemory;
    return sum;
}
static nvmlReturn_t running(nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_v2_t *infos,
                            const char *fn) {
    DEV_PROLOGUE(fn);
    if (!count) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    int n = procs_of(gi, NULL, 1 << 20);
    if (n == 0) { *count = 0; UNLOCK_RETURN(NVML_SUCCESS); }
    if (!infos || *count < (unsigned int)n) { *count = (unsigned int)n; UNLOCK_RETURN(NVML_ERROR_INSUFFICIENT_SIZE); }
    *count = (unsigned int)procs_of(gi, infos, n);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *p) { return running(d, c, p, "nvmlDeviceGetComputeRunningProcesses"); }
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *p) { return running(d, c, p, "nvmlDeviceGetComputeRunningProcesses"); }
static nvmlReturn_t no_graphics(nvmlDevice_t dev, unsigned int *count, const char *fn) {
    DEV_PROLOGUE(fn);
    if (!count) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *count = 0;
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, void *p) { (void)p; return no_graphics(d, c, "nvmlDeviceGetGraphicsRunningProcesses"); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, void *p) { (void)p; return no_graphics(d, c, "nvmlDeviceGetGraphicsRunningProcesses"); }

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t dev, unsigned int size, unsigned long *set) {
    DEV_PROLOGUE("nvmlDeviceGetCpuAffinity");
    if (!set || !size) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    memset(set, 0, size * sizeof *set);
    unsigned long bits = 8 * sizeof *set;
    const char *p = gstr(gi, "cpus", NULL);
    char all[32];
    if (!p) {
        long n = sysconf(_SC_NPROCESSORS_CONF);
        snprintf(all, sizeof all, "0-%ld", n > 0 ? n - 1 : 0);
        p = all;
    }
    while (*p) {
        char *end;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        if (end == p) break;
        if (*end == '-') hi = strtoul(end + 1, &end, 10);
        for (unsigned long c = lo; c <= hi && c < size * bits; c++) set[c / bits] |= 1UL << (c % bits);
        p = *end == ',' ? end + 1 : end;
        if (*p && (*p < '0' || *p > '9')) break;
    }
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t dev, unsigned int *node) {
    DEV_PROLOGUE("nvmlDeviceGetNumaNodeId");
    if (!node) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *node = (unsigned int)gnum(gi, "numa", 0);
    UNLOCK_RETURN(NVML_SUCCESS);
}

/* ---------------- node state: firmware, settings, links, MIG instances (docs/real-fleet.md) ----
 * Keys (gpuN. or gpu*.): vbios, inforom.img|oem|ecc|pwr ("N/A" or absent: not supported),
 * gsp.enabled (1), gsp.version (the driver's), compute_mode (NVML enum: 0 default, 2 prohibited,
 * 3 exclusive process), power.min_mw / power.max_mw, clock.app.graphics|mem and
 * clock.app.default.graphics|mem (clock.app.supported=0: not supported, as on Ada and later),
 * clock.locked.min|max (`nvidia-smi -lgc`; NVML has no getter for it: the GPU only runs slower,
 * with the user-defined-clocks event reason), nvlink.count + nvlink.down (a list of link
 * numbers), fabric.state (NVML_GPU_FABRIC_STATE_*; 0 = not supported) + fabric.status,
 * mig.profiles ("index:id:name:slices:count:memMB;..." what the GPU model offers) and
 * mig.gi ("profileId:start,..." the GPU instances there are now; a reboot clears them).
 * The fake nvidia-smi writes these keys (fleet/lab/nvml/nvidia_smi.py); the lab's boot resets
 * those a real reboot resets (fleet/lab/hosts.py). */
static nvmlReturn_t str_or_na(int gi, const char *key, const char *dflt, char *out, unsigned int len) {
    const char *v = gstr(gi, key, dflt);
    if (!v || !*v || !strcmp(v, "N/A")) return NVML_ERROR_NOT_SUPPORTED;
    return copy_str(out, len, v);
}
EXPORT nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t dev, char *v, unsigned int length) {
    DEV_PROLOGUE("nvmlDeviceGetInforomImageVersion");
    UNLOCK_RETURN(str_or_na(gi, "inforom.img", "G520.0200.00.05", v, length));
}
/* object: 0 OEM, 1 ECC, 2 power */
EXPORT nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t dev, int object, char *v, unsigned int length) {
    DEV_PROLOGUE("nvmlDeviceGetInforomVersion");
    static const char *keys[] = {"inforom.oem", "inforom.ecc", "inforom.pwr"};
    static const char *dflt[] = {"2.1", "7.16", "N/A"};
    if (object < 0 || object > 2) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    UNLOCK_RETURN(str_or_na(gi, keys[object], dflt[object], v, length));
}
EXPORT nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t dev, unsigned int *enabled, unsigned int *dflt) {
    DEV_PROLOGUE("nvmlDeviceGetGspFirmwareMode");
    if (!enabled || !dflt) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *enabled = (unsigned int)gnum(gi, "gsp.enabled", 1);
    *dflt = (unsigned int)gnum(gi, "gsp.default", 1);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t dev, char *v) {
    DEV_PROLOGUE("nvmlDeviceGetGspFirmwareVersion");
    if (!v) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "gsp.enabled", 1)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    const char *d = kv_get("driver_version");
    UNLOCK_RETURN(copy_str(v, 64, gstr(gi, "gsp.version", d ? d : "N/A")));
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t dev, int *mode) {
    DEV_PROLOGUE("nvmlDeviceGetComputeMode");
    if (!mode) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *mode = (int)gnum(gi, "compute_mode", 0);
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t dev, unsigned int *lo, unsigned int *hi) {
    DEV_PROLOGUE("nvmlDeviceGetPowerManagementLimitConstraints");
    if (!lo || !hi) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *lo = (unsigned int)gnum(gi, "power.min_mw", 200000);
    *hi = (unsigned int)gnum(gi, "power.max_mw", gnum(gi, "power.default_limit_mw", 700000));
    UNLOCK_RETURN(NVML_SUCCESS);
}
/* clock type: 0 graphics, 1 SM, 2 memory */
static nvmlReturn_t app_clock(nvmlDevice_t dev, int type, unsigned int *mhz, int dflt, const char *fn) {
    DEV_PROLOGUE(fn);
    if (!mhz || type < 0 || type > 2) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "clock.app.supported", 1)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    const char *what = type == 2 ? "mem" : "graphics";
    char k[64], kd[64];
    snprintf(kd, sizeof kd, "clock.app.default.%s", what);
    snprintf(k, sizeof k, "clock.app.%s", what);
    unsigned long long d = gnum(gi, kd, type == 2 ? 2619 : 1980);
    *mhz = (unsigned int)(dflt ? d : gnum(gi, k, d));
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t d, int type, unsigned int *mhz) { return app_clock(d, type, mhz, 0, "nvmlDeviceGetApplicationsClock"); }
EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t d, int type, unsigned int *mhz) { return app_clock(d, type, mhz, 1, "nvmlDeviceGetDefaultApplicationsClock"); }

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, unsigned int *active) {
    DEV_PROLOGUE("nvmlDeviceGetNvLinkState");
    if (!active) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long n = gnum(gi, "nvlink.count", 0);
    if (!n || link >= n) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    const char *down = gstr(gi, "nvlink.down", "");
    *active = 1;
    while (*down) {
        char *end;
        unsigned long l = strtoul(down, &end, 10);
        if (end == down) break;
        if (l == link) *active = 0;
        down = *end == ',' ? end + 1 : end;
    }
    UNLOCK_RETURN(NVML_SUCCESS);
}

typedef struct { unsigned char clusterUuid[16]; int status; unsigned int cliqueId; unsigned int state; } nvmlGpuFabricInfo_t;
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t dev, nvmlGpuFabricInfo_t *info) {
    DEV_PROLOGUE("nvmlDeviceGetGpuFabricInfo");
    if (!info) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long state = gnum(gi, "fabric.state", 0);
    if (!state) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    memset(info, 0, sizeof *info);
    info->state = (unsigned int)state;
    info->status = (int)gnum(gi, "fabric.status", 0);
    info->cliqueId = (unsigned int)gnum(gi, "fabric.clique", 0);
    UNLOCK_RETURN(NVML_SUCCESS);
}

/* MIG: profile table and GPU instances */
typedef struct { unsigned int start, size; } nvmlGpuInstancePlacement_t;
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
struct mig_gi { int gpu; unsigned int id, profileId, start, size; };
typedef struct mig_gi *nvmlGpuInstance_t;
typedef struct { nvmlDevice_t device; unsigned int id, profileId; nvmlGpuInstancePlacement_t placement; } nvmlGpuInstanceInfo_t;
static struct mig_gi g_gis[MAX_GPUS][16];

/* profile `index` of the table -> fields; 0 when the GPU offers none (caller holds g_lock) */
static int mig_profile(int gi, unsigned int index, unsigned int *id, char *name, size_t nlen,
                       unsigned int *slices, unsigned int *count, unsigned long long *mem) {
    const char *p = gstr(gi, "mig.profiles", "");
    while (*p) {
        unsigned int idx, pid, sl, cnt; unsigned long long mb; char nm[64];
        if (sscanf(p, "%u:%u:%63[^:]:%u:%u:%llu", &idx, &pid, nm, &sl, &cnt, &mb) == 6 && idx == index) {
            if (id) *id = pid;
            if (name) snprintf(name, nlen, "MIG %s", nm);
            if (slices) *slices = sl;
            if (count) *count = cnt;
            if (mem) *mem = mb;
            return 1;
        }
        const char *semi = strchr(p, ';');
        if (!semi) break;
        p = semi + 1;
    }
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t dev, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info) {
    DEV_PROLOGUE("nvmlDeviceGetGpuInstanceProfileInfoV");
    if (!info) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    unsigned int version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    if (!mig_profile(gi, profile, &info->id, info->name, sizeof info->name, &info->sliceCount,
                     &info->instanceCount, &info->memorySizeMB))
        UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    info->multiprocessorCount = info->sliceCount * 16;
    info->copyEngineCount = info->sliceCount;
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t dev, unsigned int profileId, nvmlGpuInstance_t *out, unsigned int *count) {
    DEV_PROLOGUE("nvmlDeviceGetGpuInstances");
    if (!count) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (!gnum(gi, "mig.current", 0)) UNLOCK_RETURN(NVML_ERROR_NOT_SUPPORTED);
    const char *p = gstr(gi, "mig.gi", "");
    unsigned int n = 0, seq = 0;
    while (*p && seq < 16) {
        char *end;
        unsigned long pid = strtoul(p, &end, 10), start = 0;
        if (end == p) break;
        if (*end == ':') start = strtoul(end + 1, &end, 10);
        seq++;
        if (pid == profileId) {
            struct mig_gi *g = &g_gis[gi][seq - 1];
            g->gpu = gi; g->id = seq; g->profileId = (unsigned int)pid; g->start = (unsigned int)start;
            g->size = 1;
            for (unsigned int i = 0; i < 16; i++) {
                unsigned int id, sl;
                if (mig_profile(gi, i, &id, NULL, 0, &sl, NULL, NULL) && id == pid) { g->size = sl; break; }
            }
            if (out) out[n] = g;
            n++;
        }
        while (*end && *end != ',') end++;
        p = *end ? end + 1 : end;
    }
    *count = n;
    UNLOCK_RETURN(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t g, nvmlGpuInstanceInfo_t *info) {
    pthread_mutex_lock(&g_lock);
    if (!g_refcount) UNLOCK_RETURN(NVML_ERROR_UNINITIALIZED);
    if (!info || !g || g < &g_gis[0][0] || g >= &g_gis[0][0] + MAX_GPUS * 16) UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);
    info->device = &g_gpus[g->gpu];
    info->id = g->id;
    info->profileId = g->profileId;
    info->placement.start = g->start;
    info->placement.size = g->size;
    UNLOCK_RETURN(NVML_SUCCESS);
}
