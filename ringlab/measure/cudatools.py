"""Readers of the CUDA tools' logs: cuda-samples' ``p2pBandwidthLatencyTest`` and ``bandwidthTest``, and
``nvbandwidth`` (text or JSON). Each takes the text a tool printed and returns a dict with ``format`` and
the numbers (see :mod:`ringlab.measure.logs`, which detects the format)."""
from __future__ import annotations

import json
import re

from .logformat import GB, LogFormatError, lines_of, number


_P2P_SECTIONS = [  # title (regex) -> the key of the matrix, or of its GPU and CPU parts
    (r"P2P Connectivity Matrix", "connectivity"),
    (r"Unidirectional P2P=Disabled Bandwidth", "unidirectional_disabled"),
    (r"Unidirectional P2P=Enabled Bandwidth( \(P2P Writes\))? Matrix", "unidirectional_enabled"),
    (r"Unidirectional P2P=Enabled Bandwidth \(P2P Reads\)", "unidirectional_enabled_reads"),
    (r"Bidirectional P2P=Disabled Bandwidth", "bidirectional_disabled"),
    (r"Bidirectional P2P=Enabled Bandwidth", "bidirectional_enabled"),
    (r"P2P=Disabled Latency", "latency_{}_disabled"),
    (r"P2P=Enabled Latency( \(P2P Writes\))? Matrix", "latency_{}_enabled"),
    (r"P2P=Enabled Latency \(P2P Reads\)", "latency_{}_enabled_reads"),
]


def looks_like_p2p(text: str) -> bool:
    return "P2P Connectivity Matrix" in text or "Unidirectional P2P=Disabled Bandwidth" in text


def read_p2p(text: str, **_) -> dict:
    """The devices and matrices of a ``p2pBandwidthLatencyTest`` log."""
    result = {"format": "p2pBandwidthLatencyTest", "devices": [], "p2p_method": "writes", "matrices": {}}
    section, key = None, None
    for line in lines_of(text):
        if m := re.match(r"Device: (\d+), (.*), pciBusID: (\w+), pciDeviceID: (\w+), pciDomainID:\s*(\w+)", line):
            result["devices"].append({"device": int(m.group(1)), "name": m.group(2).strip(),
                                      "bus": f"{int(m.group(5), 16):04x}:{int(m.group(3), 16):02x}:{int(m.group(4), 16):02x}"})
            continue
        titles = [name for pattern, name in _P2P_SECTIONS if re.match(pattern, line.strip())]
        if titles:
            section, key = titles[-1], None
            continue
        fields = line.split()
        if section is None or not fields:
            continue
        if fields[0] in ("D\\D", "GPU", "CPU"):  # a matrix's header row
            key = section.format(fields[0].lower()) if "{}" in section else section
            result["matrices"][key] = []
        elif key is not None and fields[0].isdigit() and len(fields) > 1:
            result["matrices"][key].append([float(v) for v in fields[1:]])
    reads = {k: v for k, v in result["matrices"].items() if k.endswith("_reads")}
    if reads:  # --p2p_read: the reads are what P2P=Enabled means in this run
        result["p2p_method"] = "reads"
        for k, v in reads.items():
            result["matrices"][k.removesuffix("_reads")] = v
            del result["matrices"][k]
    for name, matrix in result["matrices"].items():
        if any(len(row) != len(matrix) for row in matrix):
            raise LogFormatError(f"p2pBandwidthLatencyTest: the {name} matrix is not square (a cut log?)")
    if not result["matrices"]:
        raise LogFormatError("a p2pBandwidthLatencyTest log without a single matrix (was the run cut short?)")
    return result


_DIRECTIONS = {"Host to Device": "host_to_device", "Device to Host": "device_to_host",
               "Device to Device": "device_to_device", "H2D": "host_to_device", "D2H": "device_to_host",
               "D2D": "device_to_device"}


def looks_like_bandwidth_test(text: str) -> bool:
    return bool(re.search(r"Transfer Size \(Bytes\)\s+Bandwidth\((GB|MB)/s\)", text)) or "bandwidthTest-" in text


def read_bandwidth_test(text: str, **_) -> dict:
    """The rows of a cuda-samples ``bandwidthTest`` log (its table, or its ``--csv`` lines)."""
    result = {"format": "bandwidthTest", "devices": [], "mode": None, "rows": []}
    direction = memory = None
    scale = GB
    for line in lines_of(text):
        stripped = line.strip()
        if m := re.match(r"Device (\d+): (.+)$", stripped):
            result["devices"].append({"device": int(m.group(1)), "name": m.group(2).strip()})
        elif m := re.match(r"(Quick|Range|Shmoo) Mode", stripped):
            result["mode"] = m.group(1).lower()
        elif m := re.match(r"(Host to Device|Device to Host|Device to Device) Bandwidth, (\d+) Device", stripped):
            direction = _DIRECTIONS[m.group(1)]
        elif m := re.match(r"(PINNED|PAGEABLE) Memory Transfers", stripped):
            memory = m.group(1).lower()
        elif m := re.match(r"Transfer Size \(Bytes\)\s+Bandwidth\((GB|MB)/s\)", stripped):
            scale = GB if m.group(1) == "GB" else 1e6
        elif m := re.match(r"bandwidthTest-(\w+)-(\w+), Bandwidth = ([\d.]+) (GB|MB)/s, Time = [\d.e-]+ s, "
                           r"Size = (\d+) bytes", stripped):
            result["rows"].append({"direction": _DIRECTIONS.get(m.group(1), m.group(1)), "memory": m.group(2).lower(),
                                   "bytes": int(m.group(5)),
                                   "Bps": float(m.group(3)) * (GB if m.group(4) == "GB" else 1e6)})
        elif direction and (m := re.match(r"(\d+)\s+([\d.]+)$", stripped)):
            result["rows"].append({"direction": direction, "memory": memory, "bytes": int(m.group(1)),
                                   "Bps": float(m.group(2)) * scale})
    if not result["rows"]:
        raise LogFormatError("a bandwidthTest log without a single measurement (was the run cut short?)")
    return result


def looks_like_nvbandwidth(text: str) -> bool:
    return "nvbandwidth Version:" in text or bool(re.search(r'"nvbandwidth"\s*:', text))


def read_nvbandwidth(text: str, **_) -> dict:
    """Test cases of an ``nvbandwidth`` run, from its text output or its JSON (``-j``)."""
    result = {"format": "nvbandwidth", "version": None, "driver": None, "cuda_runtime": None, "devices": [],
              "testcases": {}}
    if text.lstrip().startswith("{"):
        try:
            return _nvbandwidth_json(text, result)
        except LogFormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
            raise LogFormatError(f"nvbandwidth's JSON, but not as nvbandwidth writes it ({type(err).__name__}: "
                                 f"{err})") from None
    return _nvbandwidth_text(text, result)


def _nvbandwidth_json(text: str, result: dict) -> dict:
    root = json.loads(text)["nvbandwidth"]
    result.update(version=root.get("version"), driver=root.get("Driver Version"),
                  cuda_runtime=root.get("CUDA Runtime Version"))
    for entry in root.get("GPU Device list", []):
        if m := re.match(r"(\d+): (.+) \((\w+:\w+:\w+)\)", entry):
            result["devices"].append({"device": int(m.group(1)), "name": m.group(2), "bus": m.group(3)})
    for case in root.get("testcases", []):
        matrix = case.get("bandwidth_matrix")
        result["testcases"][case["name"]] = {
            "status": case.get("status"), "description": case.get("bandwidth_description"),
            "matrix": None if matrix is None else [[number(v) for v in row] for row in matrix],
            "sum": case.get("sum")}
    return _checked_nvbandwidth(result)


def _nvbandwidth_text(text: str, result: dict) -> dict:
    name = None
    matrix: list | None = None
    for line in lines_of(text):
        stripped = line.strip()
        if m := re.match(r"nvbandwidth Version: (\S+)", stripped):
            result["version"] = m.group(1)
        elif m := re.match(r"Driver Version: (\S+)", stripped):
            result["driver"] = m.group(1)
        elif m := re.match(r"CUDA Runtime Version: (\d+)", stripped):
            result["cuda_runtime"] = int(m.group(1))
        elif m := re.match(r"Device (\d+): (.+) \((\w+:\w+:\w+)\)$", stripped):
            result["devices"].append({"device": int(m.group(1)), "name": m.group(2), "bus": m.group(3)})
        elif m := re.match(r"Running (\S+)\.$", stripped):
            name, matrix = m.group(1), None
            result["testcases"][name] = {"status": "Running", "description": None, "matrix": None, "sum": None}
        elif name and (m := re.match(r"(Waived|Error|Not Found): ?(.*)$", stripped)):
            result["testcases"][name]["status"] = m.group(1)
        elif name and re.search(r"bandwidth \(GB/s\)$", stripped):
            result["testcases"][name]["description"] = stripped
            matrix = []
        elif name and (m := re.match(r"SUM (\S+) ([\d.]+)", stripped)):
            result["testcases"][m.group(1)].update(status="Passed", sum=float(m.group(2)), matrix=matrix)
            matrix = None
        elif matrix is not None and stripped:
            fields = stripped.split()
            if len(matrix) or not all(f.isdigit() for f in fields):  # the first line is the columns' labels
                matrix.append([number(v) for v in fields[1:]])
    return _checked_nvbandwidth(result)


def _checked_nvbandwidth(result: dict) -> dict:
    if not any(case["matrix"] for case in result["testcases"].values()):
        raise LogFormatError("an nvbandwidth log without a single finished test case (was the run cut short?)")
    return result
