"""Locking a process down before it runs a team's code: no new processes, no reaching others.

``lock_down()`` is called by the team process (``team/process.py``) on itself, before it imports
a single line of the team's code. It installs a seccomp filter (classic BPF, built here: no
libseccomp needed) that makes these system calls fail with EPERM:

    fork, vfork, clone without CLONE_THREAD     (threads stay allowed: Numba's thread pool)
    execve, execveat                            (the team process cannot become another program)
    ptrace, process_vm_readv/writev, pidfd_getfd, pidfd_open   (no reading another process)
    kill, tgkill, rt_(tg)sigqueueinfo to any process but itself; tkill, pidfd_send_signal
                                                (no stopping, waking or killing the harness)
    timer_create, mq_notify, io_uring_setup, fcntl F_SETOWN/F_SETOWN_EX/F_SETSIG/F_NOTIFY/
    F_SETLEASE                                  (nothing that could send it a SIGCONT, or work,
                                                 while the harness holds it stopped)
    setpriority, sched_setparam/setscheduler/setaffinity/setattr, prlimit64, ioprio_set on any
    process but itself                          (no slowing or starving the harness)

and ``clone3`` with ENOSYS, so that the C library falls back to ``clone``, whose flags the
filter can read (clone3 passes them in memory, out of a filter's reach). A filter can never be
removed, and every thread created later inherits it. Also: the no-new-privileges bit (needed
to install a filter without privileges), core dumps off, and death with the parent.

Why a filter and not only a sandbox: the team process shares its sandbox with the harness process
that times it. A team's CPU forward that forks a child to keep computing after it "returns",
or that reads the harness's memory, is stopped here, on every engine, also on a student's
own machine. The harness keeps itself out of reach too (``make_undumpable``): a process that
is not dumpable cannot be ptraced, nor its /proc/PID/mem, environ or fd read, by its own uid.

x86-64 and aarch64 only; elsewhere ``lock_down`` raises LockdownError (the team process refuses to
run team code rather than run it unguarded).
"""
import ctypes
import ctypes.util
import errno
import os
import platform
import resource
import signal
import struct

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# classic BPF opcodes
BPF_LD_W_ABS = 0x20           # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15              # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35              # BPF_JMP | BPF_JGE | BPF_K
BPF_JSET_K = 0x45             # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06              # BPF_RET | BPF_K

SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_KILL_PROCESS = 0x80000000

CLONE_THREAD = 0x00010000
X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0_LOW = 0, 4, 16

ARCHES = {
    # machine: (AUDIT_ARCH_*, {syscall: number})
    "x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59,
                            "execveat": 322, "ptrace": 101, "process_vm_readv": 310,
                            "process_vm_writev": 311, "pidfd_getfd": 438, "pidfd_open": 434,
                            "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
                            "rt_tgsigqueueinfo": 297, "pidfd_send_signal": 424, "timer_create": 222,
                            "mq_notify": 244, "io_uring_setup": 425, "fcntl": 72, "setpriority": 141,
                            "sched_setparam": 142, "sched_setscheduler": 144, "sched_setaffinity": 203,
                            "sched_setattr": 314, "prlimit64": 302, "ioprio_set": 251}),
    "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "ptrace": 117,
                             "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
                             "pidfd_open": 434, "kill": 129, "tkill": 130, "tgkill": 131,
                             "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_send_signal": 424,
                             "timer_create": 107, "mq_notify": 184, "io_uring_setup": 425, "fcntl": 25,
                             "setpriority": 140, "sched_setparam": 118, "sched_setscheduler": 119,
                             "sched_setaffinity": 122, "sched_setattr": 274, "prlimit64": 261,
                             "ioprio_set": 30}),
}
DENIED = ("fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
          "pidfd_getfd", "pidfd_open", "tkill", "pidfd_send_signal", "timer_create", "mq_notify", "io_uring_setup")
# system calls allowed on this process only: (name, the argument naming the process, 0 = "this one" too)
SELF_ONLY = (("kill", 0, False), ("tgkill", 0, False), ("rt_sigqueueinfo", 0, False),
             ("rt_tgsigqueueinfo", 0, False), ("setpriority", 1, True), ("sched_setparam", 0, True),
             ("sched_setscheduler", 0, True), ("sched_setaffinity", 0, True), ("sched_setattr", 0, True),
             ("prlimit64", 0, True), ("ioprio_set", 1, True))
# fcntl commands that would have the kernel signal the process (a SIGCONT while it is held stopped)
F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY = 8, 10, 15, 1024, 1026
FCNTL_DENIED = (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY)


class LockdownError(Exception):
    """The process could not be locked down (unknown architecture, a kernel without seccomp)."""


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _prctl(libc, *args):
    values = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
    values += [ctypes.c_ulong(0)] * (5 - len(values))
    if libc.prctl(*values) != 0:
        err = ctypes.get_errno()
        raise LockdownError(f"prctl({args[0]}) failed: {os.strerror(err)}")


def _assemble(items):
    """Classic BPF from ``items``: (code, jt, jf, k) instructions whose jt/jf may name a label, and
    ("label", name) marks; jumps are forward and relative."""
    labels, position = {}, 0
    for item in items:
        if item[0] == "label":
            labels[item[1]] = position
        else:
            position += 1
    program, position = [], 0
    for item in items:
        if item[0] == "label":
            continue
        code, jt, jf, k = item
        jt = labels[jt] - position - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - position - 1 if isinstance(jf, str) else jf
        assert 0 <= jt < 256 and 0 <= jf < 256, item
        program.append((code, jt, jf, k))
        position += 1
    return program


def filter_program(machine=None, pid=None):
    """The filter as a list of (code, jt, jf, k) instructions for ``machine`` (default: this one),
    for the process ``pid`` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise LockdownError(f"no seccomp filter for the {machine} architecture (x86_64, aarch64 only)")
    pid = os.getpid() if pid is None else int(pid)
    audit_arch, numbers = ARCHES[machine]
    errno_perm = SECCOMP_RET_ERRNO | errno.EPERM
    items = [
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        (BPF_JEQ_K, 1, 0, audit_arch),            # another ABI (x86's 32-bit): kill
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ]
    if machine == "x86_64":                       # x32 system calls: refused
        items += [(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, errno_perm)]
    for name in DENIED:
        if name in numbers:
            items += [(BPF_JEQ_K, 0, 1, numbers[name]), (BPF_RET_K, 0, 0, errno_perm)]
    for name, arg, zero_is_self in SELF_ONLY:
        low, high = OFFSET_ARG0_LOW + 8 * arg, OFFSET_ARG0_LOW + 8 * arg + 4
        items += [(BPF_JEQ_K, 0, f"{name}-next", numbers[name]),
                  (BPF_LD_W_ABS, 0, 0, high),
                  (BPF_JEQ_K, 0, f"{name}-deny", 0),       # a negative pid (a group, every process): refused
                  (BPF_LD_W_ABS, 0, 0, low)]
        if zero_is_self:
            items += [(BPF_JEQ_K, "allow", 0, 0)]
        items += [(BPF_JEQ_K, "allow", 0, pid),
                  ("label", f"{name}-deny"), (BPF_RET_K, 0, 0, errno_perm),
                  ("label", f"{name}-next")]
    items += [(BPF_JEQ_K, 0, "fcntl-next", numbers["fcntl"]),
              (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW + 8)]           # the command (argument 1)
    for command in FCNTL_DENIED:
        items += [(BPF_JEQ_K, "fcntl-deny", 0, command)]
    items += [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
              ("label", "fcntl-deny"), (BPF_RET_K, 0, 0, errno_perm),
              ("label", "fcntl-next"),
              (BPF_JEQ_K, 0, 1, numbers["clone3"]), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
              (BPF_JEQ_K, 0, 4, numbers["clone"]),
              (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW),    # clone's flags (their low 32 bits)
              (BPF_JSET_K, 1, 0, CLONE_THREAD),
              (BPF_RET_K, 0, 0, errno_perm),            # a new process: refused
              (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),     # a thread
              ("label", "allow"),
              (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    return _assemble(items)


def lock_down():
    """Lock this process down for good (see the module docstring); LockdownError where it cannot."""
    libc = _libc()
    prog = filter_program()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
    array = (_Filter * len(prog))(*[_Filter(*ins) for ins in prog])
    program = _Program(len(prog), array)
    _prctl(libc, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.cast(ctypes.pointer(program), ctypes.c_void_p))


def make_undumpable():
    """Keep this process's memory, environment and file descriptors out of reach of other processes
    of the same user (ptrace, /proc/PID/mem, environ, fd): the harness calls it before it starts
    the team process. Returns False where prctl is unavailable."""
    try:
        _prctl(_libc(), PR_SET_DUMPABLE, 0)
    except (LockdownError, OSError, AttributeError):
        return False
    return True


def status():
    """This process's seccomp mode as /proc reports it (0 none, 2 filter), or None where unknown."""
    try:
        for line in open("/proc/self/status", encoding="ascii"):
            if line.startswith("Seccomp:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _pack(prog):     # for tests: the program's bytes, as the kernel reads them
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)
