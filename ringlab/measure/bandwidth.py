"""``ringlab bandwidth``: what the links of this machine really carry, next to what they could.

Without GPUs: the memory copy rate, and an MPI ping-pong between ranks 0 and 1 (latency and
bandwidth over shared memory), shown as a fraction of the copy rate measured in the same run.
With GPUs (cupy): host to device and back, pinned and pageable, one way and both ways at once;
device-to-device copies; a peer-to-peer matrix over every GPU pair with peer access on and off,
as CUDA's p2pBandwidthLatencyTest does; each next to the theoretical peak of its link (PCIe from
the generation and width NVML reports, NVLink from the link count) and the ratio. Host<->device
and device copies are timed with CUDA events (the stream's time, not Python's; both ways at once
on two non-blocking streams joined before the end event); the small-copy latency is an 8-byte
copy from pinned memory, timed the same way. Copies from and to pageable memory are timed by the
host's clock, as CUDA's bandwidthTest times them: such a copy holds the thread that asks for it,
so both ways at once is two threads, one a direction, let go together. Peer-to-peer copies are
timed by the host until both GPUs are done.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import numpy as np

REPEATS = 20  # the CUDA sample's 5 repeats vary 5-10%: take the median of more


def _median_seconds(run, repeats: int = REPEATS, sync=None) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def memcpy_rate(nbytes: int = 64 << 20, repeats: int = REPEATS) -> float:
    """Bytes copied per second by one core, numpy array to numpy array (median of ``repeats``)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    return nbytes / _median_seconds(lambda: np.copyto(dst, src), repeats)


def pingpong(comm, sizes: list[int], repeats: int = REPEATS, staged: bool = False) -> list[dict]:
    """Rank 0 sends to rank 1 and back; one-way time is half a round trip. Other ranks wait.

    ``staged=True`` passes every message through a second buffer on each side (one copy before the
    send, one after the receive), as a GPU message staged through host memory does: the CPU analogue
    of host-staged against direct transfers. Rows are returned on rank 0 only.
    """
    rank = comm.Get_rank()
    rows = []
    for nbytes in sizes:
        buf = np.zeros(max(nbytes, 1), dtype=np.uint8)[:nbytes]
        stage = np.zeros_like(buf) if staged else buf

        def send(dest):
            if staged:
                np.copyto(stage, buf)
            comm.Send(stage, dest=dest, tag=7)

        def recv(source):
            comm.Recv(stage, source=source, tag=7)
            if staged:
                np.copyto(buf, stage)

        comm.Barrier()
        if rank == 0:
            def round_trip():
                send(1)
                recv(1)
            half = _median_seconds(round_trip, repeats) / 2
            rows.append({"bytes": nbytes, "one_way_s": half, "bandwidth_Bps": nbytes / half if nbytes else 0.0,
                         "staged": staged})
        elif rank == 1:
            for _ in range(repeats + 1):
                recv(0)
                send(0)
    return rows


def cpu_report(comm, sizes: list[int], out) -> dict:
    """The no-GPU measurements: copy rate on rank 0, then ping-pong rows against it."""
    rate = memcpy_rate() if comm.Get_rank() == 0 else 0.0
    rows = pingpong(comm, sizes) if comm.Get_size() >= 2 else []
    if comm.Get_rank() != 0:
        return {}
    print(f"# measured here, CPU only: memory copy rate {rate / 1e9:.2f} GB/s (numpy, one core, 64 MiB, "
          f"median of {REPEATS})", file=out)
    if not rows:
        print("# MPI ping-pong needs 2 ranks: run with -n 2", file=out)
    else:
        print("# MPI ping-pong rank 0 <-> rank 1 (shared memory): one-way time and bandwidth; ratio = "
              "bandwidth / copy rate", file=out)
        print(f"# {'size (B)':>12} {'one-way (us)':>13} {'GB/s':>9} {'ratio':>7}", file=out)
        for row in rows:
            ratio = row["bandwidth_Bps"] / rate
            row["ratio_to_memcpy"] = ratio
            print(f"  {row['bytes']:>12} {row['one_way_s'] * 1e6:>13.2f} {row['bandwidth_Bps'] / 1e9:>9.3f} "
                  f"{ratio:>7.2f}", file=out)
        print(f"# small-message latency (smallest size): {rows[0]['one_way_s'] * 1e6:.2f} us one way", file=out)
    return {"memcpy_Bps": rate, "pingpong": rows}


def local_cpus(bus_id: str, root: str = "/sys/bus/pci/devices") -> set[int] | None:
    """The CPUs Linux lists as local to the PCI device ``bus_id`` (its NUMA node's), from ``local_cpulist``
    in sysfs; None where Linux does not say."""
    try:
        domain, rest = bus_id.strip().lower().split(":", 1)
        text = Path(root, f"{int(domain, 16):04x}:{rest}", "local_cpulist").read_text().strip()
    except (OSError, ValueError):
        return None
    cpus: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus or None


@contextlib.contextmanager
def placed_near(bus_id: str | None):
    """Within the block this thread runs on the CPUs local to that GPU (where this process may run there),
    so host buffers made in it sit in the GPU's NUMA node; yields those CPUs (None: left as it was)."""
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    near = local_cpus(bus_id) if bus_id and mine is not None else None
    usable = (near & mine) if near else None
    if not usable:
        yield None
        return
    os.sched_setaffinity(0, usable)
    try:
        yield usable
    finally:
        os.sched_setaffinity(0, mine)


def _cpu_list(cpus: set[int] | None) -> str | None:
    """'0-15,32-47' for a set of CPUs (None stays None)."""
    if not cpus:
        return None
    runs, ordered = [], sorted(cpus)
    start = prev = ordered[0]
    for cpu in ordered[1:] + [None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        runs.append(f"{start}-{prev}" if prev != start else f"{start}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(runs)


def _event_seconds(cp, run, repeats: int = REPEATS, streams=()) -> list[float]:
    """Every repeat's seconds, as :func:`_median_event_seconds` times them."""
    first, *others = list(streams) or [cp.cuda.get_current_stream()]
    run()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(first)
        run()
        for stream in others:
            first.wait_event(stream.record())
        end.record(first)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return times


def _median_event_seconds(cp, run, repeats: int = REPEATS, streams=()) -> float:
    """Median seconds of ``run()`` between CUDA events, after one warm-up that they leave out (the
    device is synchronised after it).

    The events are on the current stream, or on the first of ``streams`` when ``run()`` queues its
    work on several: the others join the first before the end event (an event recorded on each,
    waited for by the first, as CUDA's samples time concurrent copies), so the time spans the work
    of every stream."""
    return float(np.median(_event_seconds(cp, run, repeats, streams)))


def _threads_seconds(cp, runs, repeats: int = REPEATS) -> list[float]:
    """Every repeat's seconds of ``runs`` called together, each from its own host thread (on the current
    GPU, and on the CPUs this thread may use, which new threads inherit), each ending by synchronising
    its stream: from the barrier that lets them all go to the moment the last is done, on this thread's
    clock. One warm-up first, left out."""
    gpu = cp.cuda.Device().id
    start, done = threading.Barrier(len(runs) + 1), threading.Barrier(len(runs) + 1)
    failed = []

    def work(run):
        cp.cuda.Device(gpu).use()  # a new thread starts on GPU 0, as CUDA's runtime does
        try:
            for _ in range(repeats + 1):
                start.wait()
                run()
                done.wait()
        except BaseException as err:  # raised again on the calling thread
            failed.append(err)
            start.abort()
            done.abort()

    threads = [threading.Thread(target=work, args=(run,), daemon=True) for run in runs]
    for thread in threads:
        thread.start()
    times = []
    try:
        for _ in range(repeats + 1):
            start.wait()
            began = time.perf_counter()
            done.wait()
            times.append(time.perf_counter() - began)
    except threading.BrokenBarrierError:
        pass
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    return times[1:]


def _host_device_rows(cp, nbytes: int, pcie_peak: float | None) -> list[dict]:
    """Host<->device rates of the current GPU, pinned and pageable, one way and both ways at once: rows of
    ``what``, ``pinned``, ``Bps`` (the median of the repeats), ``spread_Bps`` ([slowest, fastest]) and
    ``peak_Bps``."""
    import cupyx

    device = cp.empty(nbytes, dtype=cp.uint8)
    stream = cp.cuda.get_current_stream()  # the copies' stream, which the events time
    rows = []

    def host_buffer(pinned: bool):
        return cupyx.empty_pinned(nbytes, np.uint8) if pinned else np.empty(nbytes, np.uint8)

    def rates(moved: int, times: list[float]) -> tuple[float, list[float]]:
        return moved / float(np.median(times)), [moved / max(times), moved / min(times)]

    for pinned in (True, False):
        host, back = host_buffer(pinned), host_buffer(pinned)
        other = cp.empty_like(device)
        s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
        if pinned:  # the streams' own time, between CUDA events
            h2d = rates(nbytes, _event_seconds(cp, lambda: device.set(host, stream=stream)))
            d2h = rates(nbytes, _event_seconds(cp, lambda: device.get(stream=stream, out=host, blocking=False)))

            def both():  # one copy each way, each on its own non-blocking stream
                other.set(host, stream=s1)
                device.get(stream=s2, out=back, blocking=False)
            both_ways = rates(2 * nbytes, _event_seconds(cp, both, streams=(s1, s2)))
        else:
            # A copy from or to pageable memory returns only when CUDA has moved its bytes through a pinned
            # staging buffer (to the device: staged; from it: done), whatever the stream. So the host's clock
            # times it, as CUDA's bandwidthTest does for pageable memory, and both ways at once is a thread
            # for each direction: asked for by one thread, one after the other, they never overlap. Two
            # threads do: cupy's set and get reach cudaMemcpyAsync through MemoryPointer.copy_from_host_async
            # / copy_to_host_async (cupy/cuda/memory.pyx), and runtime.memcpyAsync
            # (cupy_backends/cuda/api/runtime.pyx) calls it inside `with nogil:`, so one thread's copy leaves
            # the GIL to the other (measured on an H200, 256 MiB: 19.4 and 24.9 GB/s both ways at once against 10.4-15.2
            # one way; results/2026-11-27_nvidia-h200 and -mps).
            def to_device():
                other.set(host, stream=s1)
                s1.synchronize()

            def from_device():
                device.get(stream=s2, out=back, blocking=False)
                s2.synchronize()
            h2d = rates(nbytes, _threads_seconds(cp, [to_device]))
            d2h = rates(nbytes, _threads_seconds(cp, [from_device]))
            both_ways = rates(2 * nbytes, _threads_seconds(cp, [to_device, from_device]))
        for what, (rate, spread) in (("host->device", h2d), ("device->host", d2h), ("both ways at once", both_ways)):
            peak = None if pcie_peak is None else (2 * pcie_peak if what.startswith("both") else pcie_peak)
            rows.append({"what": what, "pinned": pinned, "Bps": rate, "spread_Bps": spread, "peak_Bps": peak})
    return rows


def gpu_report(out, nbytes: int = 256 << 20) -> dict:
    """Host<->device, device copies and the peer-to-peer matrix, each with its link's peak and the ratio."""
    import cupyx

    from ..mpi.devices import cupy_module
    from ..topology import discover

    cp = cupy_module()
    topology, facts = discover()
    count = cp.cuda.runtime.getDeviceCount()
    me = cp.cuda.Device().id  # discover() numbers GPUs as CUDA does
    pcie_peak = None
    if len(facts.get("gpus", [])) > me:
        # the most this GPU and its slot can do: an idle GPU may have dropped to a slower generation
        gen, width = facts["gpus"][me]["pcie_max"]
        from ..topology.presets import ENCODING, pcie_bandwidth
        pcie_peak = pcie_bandwidth(min(gen, max(ENCODING)), width)
        now = facts["gpus"][me]["pcie_current"]
        print(f"# PCIe link of gpu{me}: gen {gen} x{width} at most (gen {now[0]} x{now[1]} when NVML looked)", file=out)
    print(f"# measured here on {count} GPU(s); peaks: PCIe from NVML's generation and width, NVLink from link counts",
          file=out)
    result = {"gpus": count, "facts": facts, "host_device": [], "per_gpu": [], "p2p": {}}
    for gpu in range(count):  # each GPU from CPUs of its own NUMA node, as a rank bound to it should run
        bus = cp.cuda.runtime.deviceGetPCIBusId(gpu)
        peak = pcie_peak
        if gpu != me and len(facts.get("gpus", [])) > gpu:
            from ..topology.presets import ENCODING, pcie_bandwidth
            gen, width = facts["gpus"][gpu]["pcie_max"]
            peak = pcie_bandwidth(min(gen, max(ENCODING)), width)
        with cp.cuda.Device(gpu), placed_near(bus) as cpus:
            rows = _host_device_rows(cp, nbytes, peak)
        result["per_gpu"].append({"gpu": gpu, "bus": bus, "cpus": _cpu_list(cpus), "host_device": rows})
        if gpu == me:
            result["host_device"] = rows
        where = f" (from CPUs {_cpu_list(cpus)}, its NUMA node's)" if cpus else " (CPUs as the process had them)"
        if count > 1 or cpus:
            print(f"# gpu{gpu} {bus}{where}", file=out)
        for row in rows:
            print(_host_device_line(row), file=out)
    device = cp.empty(nbytes, dtype=cp.uint8)
    stream = cp.cuda.get_current_stream()
    copy = cp.empty_like(device)
    d2d = nbytes / _median_event_seconds(cp, lambda: copy.__setitem__(Ellipsis, device))
    result["device_copy_Bps"] = d2d
    print(f"  device->device copy          {d2d / 1e9:8.2f} GB/s (bytes copied per second; reads and writes "
          f"move twice that)", file=out)
    small = cupyx.empty_pinned(8, np.uint8)
    small[...] = 0
    small_dev = cp.zeros(8, cp.uint8)
    latency = _median_event_seconds(cp, lambda: small_dev.set(small, stream=stream))
    result["small_h2d_latency_s"] = latency
    print(f"  8-byte host->device latency  {latency * 1e6:8.2f} us (pinned, between CUDA events)", file=out)
    if count >= 2:
        result["p2p"] = _p2p_matrix(cp, count, nbytes, topology, out)
    return result


def _host_device_line(row: dict) -> str:
    """One host<->device row of :func:`gpu_report` as printed: the rate, the link's peak and their ratio, the spread
    of the repeats; a dash for the peak and the ratio where NVML gave no PCIe generation and width."""
    rate, (low, high), peak = row["Bps"], row["spread_Bps"], row["peak_Bps"]
    ratio = f"{rate / peak:.2f}" if peak else "-"
    shown = f"{peak / 1e9:8.2f} GB/s" if peak else f"{'-':>8} (NVML gave no PCIe link)"
    return (f"  {row['what']:<18} {'pinned' if row['pinned'] else 'pageable':<9} {rate / 1e9:8.2f} GB/s  peak "
            f"{shown}  ratio {ratio}  (repeats {low / 1e9:.2f}-{high / 1e9:.2f})")


ALREADY = (704, 705)  # cudaErrorPeerAccessAlreadyEnabled, cudaErrorPeerAccessNotEnabled


def _peer_access(cp, a: int, b: int, on: bool) -> bool:
    """Turn peer access between GPUs a and b on or off, both ways; whether it is on afterwards.
    Where it is impossible CUDA says so (its error is cleared by cupy before raising) and the copy
    goes through the host."""
    possible = True
    for here, there in ((a, b), (b, a)):
        with cp.cuda.Device(here):
            try:
                (cp.cuda.runtime.deviceEnablePeerAccess if on else cp.cuda.runtime.deviceDisablePeerAccess)(there)
            except cp.cuda.runtime.CUDARuntimeError as err:
                if err.status not in ALREADY:
                    possible = False
    return on and possible


def _p2p_matrix(cp, count: int, nbytes: int, topology, out) -> dict:
    peaks = topology.bandwidth_matrix() if topology is not None else None
    result = {"peer_access_possible": [[a != b and bool(cp.cuda.runtime.deviceCanAccessPeer(a, b))
                                        for b in range(count)] for a in range(count)]}
    for access in (True, False):
        matrix = np.zeros((count, count))
        for a in range(count):
            for b in range(count):
                if a == b:
                    continue
                if access:  # both directions, as p2pBandwidthLatencyTest does
                    _peer_access(cp, a, b, True)
                with cp.cuda.Device(a):
                    src = cp.empty(nbytes, cp.uint8)
                with cp.cuda.Device(b):
                    dst = cp.empty(nbytes, cp.uint8)

                def run(a=a, b=b, src=src, dst=dst):
                    cp.cuda.runtime.memcpyPeer(dst.data.ptr, b, src.data.ptr, a, nbytes)

                def both_done(a=a, b=b):  # memcpyPeer may return before the copy is done
                    for device in (a, b):
                        cp.cuda.Device(device).synchronize()
                matrix[a, b] = nbytes / _median_seconds(run, sync=both_done)
                if access:
                    _peer_access(cp, a, b, False)
        result["peer_access_on" if access else "peer_access_off"] = matrix.tolist()
        print(f"# peer-to-peer copy (GB/s), peer access {'on' if access else 'off'}; ratio to the link peak in brackets"
              + ("; pairs without peer access copy through the host either way" if access and not all(
                  all(row[:a] + row[a + 1:]) for a, row in enumerate(result["peer_access_possible"])) else ""),
              file=out)
        for a in range(count):
            cells = []
            for b in range(count):
                if a == b:
                    cells.append(f"{'-':>14}")
                else:
                    ratio = f"({matrix[a, b] / peaks[a, b]:.2f})" if peaks is not None else ""
                    cells.append(f"{matrix[a, b] / 1e9:8.2f}{ratio:>6}")
            print(f"  gpu{a} " + " ".join(cells), file=out)
    return result
