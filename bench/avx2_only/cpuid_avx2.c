/* For benchmarks only (bench/avx2_only/README.md): loaded with LD_PRELOAD, it makes every CPUID
   instruction of the process report the CPU without AVX-512 and without VNNI (AVX-512 F/DQ/IFMA/CD/
   BW/VL/VBMI/VBMI2/VNNI/BITALG/VPOPCNTDQ/BF16/FP16, AVX-VNNI, AMX), so that onnxruntime's MLAS, which
   picks its kernels by CPUID once per process, takes its AVX2 ones. Linux's CPUID faulting
   (arch_prctl ARCH_SET_CPUID; CPUs with the cpuid_fault flag) turns each CPUID into a SIGSEGV; the
   handler runs the real CPUID with faulting lifted, clears those bits and steps over the instruction.
   Only CPUID is masked: XGETBV still reports the AVX-512 state, which MLAS reads only after CPUID
   says AVX-512F. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static long set_cpuid(int on) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on); }

static void on_fault(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    greg_t *g = uc->uc_mcontext.gregs;
    unsigned char *ip = (unsigned char *)g[REG_RIP];
    (void)si;
    if (ip[0] != 0x0f || ip[1] != 0xa2) { signal(sig, SIG_DFL); return; }
    unsigned leaf = (unsigned)g[REG_RAX], sub = (unsigned)g[REG_RCX], a, b, c, d;
    set_cpuid(1);
    __cpuid_count(leaf, sub, a, b, c, d);
    set_cpuid(0);
    if (leaf == 7 && sub == 0) {
        b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
        c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23) | (1u << 24) | (1u << 25) | (1u << 22));
    }
    if (leaf == 7 && sub == 1) { a &= ~((1u << 4) | (1u << 5)); d &= ~(1u << 4); }
    g[REG_RAX] = a; g[REG_RBX] = b; g[REG_RCX] = c; g[REG_RDX] = d;
    g[REG_RIP] += 2;
}

__attribute__((constructor)) static void init(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, 0);
    if (set_cpuid(0) != 0) { static const char m[] = "cpuid_avx2: CPUID faulting not available\n"; write(2, m, sizeof m - 1); }
}
