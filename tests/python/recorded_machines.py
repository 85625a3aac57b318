"""Models of machines kiln cannot be run on here, for its topology tests: each writes, under a root
directory, the sysfs and procfs files kiln reads (point KILN_TOPOLOGY_ROOT at it), and gives the
`lscpu --parse=CPU,Core,Socket,Node` text PyTorch's run_cpu reads for the same machine.

The layouts follow how Linux numbers CPUs on these machines: on Xeon and EPYC servers the first
thread of every core comes first (CPU c is core c), then the second threads (CPU c + cores); on the
laptop model siblings are numbered next to each other (CPUs 0 and 1 are core 0), as some firmware
does. lscpu's Core column numbers cores in the order their first CPU appears."""
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Machine:
    name: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    nodes_per_socket: int
    siblings_adjacent: bool = False
    l1d_kib: int = 32
    l2_kib: int = 1024
    l3_kib: int = 32768
    cores_per_l3: int = 0           # 0: one L3 per socket
    allowed: list = None            # the affinity mask (None: every CPU)
    cgroup_cpu_max: str = None      # cgroup v2 cpu.max text, e.g. "200000 100000"
    notes: str = ""

    @property
    def cores(self):
        return self.sockets * self.cores_per_socket

    @property
    def cpu_count(self):
        return self.cores * self.threads_per_core

    def cpu_of(self, core, thread):
        """The CPU id of `thread` of global core `core`."""
        if self.siblings_adjacent:
            return core * self.threads_per_core + thread
        return thread * self.cores + core

    def node_of_core(self, core):
        socket, index = divmod(core, self.cores_per_socket)
        return socket * self.nodes_per_socket + index // (self.cores_per_socket // self.nodes_per_socket)

    def cpus(self):
        """(cpu, core, socket, node) for every CPU, ascending CPU id."""
        rows = []
        for core in range(self.cores):
            for thread in range(self.threads_per_core):
                rows.append((self.cpu_of(core, thread), core, core // self.cores_per_socket, self.node_of_core(core)))
        return sorted(rows)

    def lscpu(self):
        """`lscpu --parse=CPU,Core,Socket,Node` as util-linux prints it."""
        lines = ["# The following is the parsable format, which can be fed to other",
                 "# programs. Each different item in every column has an unique ID",
                 "# starting usually from zero.", "# CPU,Core,Socket,Node"]
        numbered = {}
        for cpu, core, socket, node in self.cpus():
            logical_core = numbered.setdefault(core, len(numbered))
            lines.append(f"{cpu},{logical_core},{socket},{node}")
        return "\n".join(lines) + "\n"

    def write(self, root):
        """Writes the machine's sysfs and procfs files under `root`; returns root."""
        root = Path(root)
        cpu_dir = root / "sys/devices/system/cpu"
        rows = self.cpus()
        all_cpus = [row[0] for row in rows]
        write(cpu_dir / "online", cpu_list(all_cpus))
        siblings = {}
        for cpu, core, socket, node in rows:
            siblings.setdefault(core, []).append(cpu)
        nodes = {}
        for cpu, core, socket, node in rows:
            nodes.setdefault(node, []).append(cpu)
        l3_span = self.cores_per_l3 or self.cores_per_socket
        for cpu, core, socket, node in rows:
            directory = cpu_dir / f"cpu{cpu}"
            write(directory / "topology/physical_package_id", str(socket))
            write(directory / "topology/core_id", str(core % self.cores_per_socket))
            write(directory / "topology/core_cpus_list", cpu_list(siblings[core]))
            write(directory / "topology/thread_siblings_list", cpu_list(siblings[core]))
            l3_first = core // l3_span * l3_span
            l3_cpus = [c for k in range(l3_first, l3_first + l3_span) for c in siblings[k]]
            caches = [(1, "Data", f"{self.l1d_kib}K", siblings[core]),
                      (1, "Instruction", "32K", siblings[core]),
                      (2, "Unified", f"{self.l2_kib}K", siblings[core]),
                      (3, "Unified", f"{self.l3_kib}K", l3_cpus)]
            for index, (level, kind, size, shared) in enumerate(caches):
                cache = directory / f"cache/index{index}"
                write(cache / "level", str(level))
                write(cache / "type", kind)
                write(cache / "size", size)
                write(cache / "shared_cpu_list", cpu_list(sorted(shared)))
        for node, cpus in nodes.items():
            write(root / f"sys/devices/system/node/node{node}/cpulist", cpu_list(sorted(cpus)))
        allowed = self.allowed if self.allowed is not None else all_cpus
        write(root / "proc/self/status",
              f"Name:\tkiln\nCpus_allowed_list:\t{cpu_list(sorted(allowed))}\n"
              f"Mems_allowed_list:\t{cpu_list(sorted(nodes))}\n")
        write(root / "proc/self/cgroup", "0::/\n")
        write(root / "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
        if self.cgroup_cpu_max:
            write(root / "sys/fs/cgroup/cpu.max", self.cgroup_cpu_max + "\n")
        return root


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def cpu_list(ids):
    """[0, 1, 2, 5] -> "0-2,5"."""
    parts, ids = [], sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpu_list(text):
    ids = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        ids.extend(range(int(first), int(last or first) + 1))
    return ids


MACHINES = {
    # Two 28-core Xeons (Cascade Lake class), Hyper-Threading on, one NUMA node per socket.
    "xeon_2s_56c": Machine("xeon_2s_56c", sockets=2, cores_per_socket=28, threads_per_core=2, nodes_per_socket=1,
                           l2_kib=1024, l3_kib=39424),
    # Two 64-core EPYCs (Milan class) in NPS4: four NUMA nodes per socket, an L3 per 8-core CCX.
    "epyc_2s_nps4": Machine("epyc_2s_nps4", sockets=2, cores_per_socket=64, threads_per_core=2, nodes_per_socket=4,
                            l2_kib=512, l3_kib=32768, cores_per_l3=8),
    # A 4-core laptop with SMT whose firmware numbers siblings next to each other.
    "laptop_4c_smt": Machine("laptop_4c_smt", sockets=1, cores_per_socket=4, threads_per_core=2, nodes_per_socket=1,
                             siblings_adjacent=True, l2_kib=512, l3_kib=8192),
    # A 2-vCPU VM whose hypervisor presents both vCPUs as the SMT siblings of one core.
    "vm_2vcpu_siblings": Machine("vm_2vcpu_siblings", sockets=1, cores_per_socket=1, threads_per_core=2,
                                 nodes_per_socket=1, l3_kib=16384),
    # A container seeing 16 CPUs (8 cores x 2) with a cgroup v2 quota of 2 CPUs.
    "container_quota_2of16": Machine("container_quota_2of16", sockets=1, cores_per_socket=8, threads_per_core=2,
                                     nodes_per_socket=1, cgroup_cpu_max="200000 100000"),
}
