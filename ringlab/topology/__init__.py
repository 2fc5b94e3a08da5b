"""Topologies: who is wired to whom and how fast, from published figures or from this machine.

- :class:`Topology` (``graph``): ranks, switches and full-duplex links, and the route a message
  takes; :func:`uniform`, :func:`joined_nodes`, :func:`ring` and :func:`from_matrix` for models and
  measurements.
- ``presets``: machines built from published figures (``preset("dgx1-v100")``); ``links``: the link
  arithmetic they rest on (PCIe generations, NVLink versions, NCCL's ratings of them).
- ``machines``: :func:`cluster`, nodes joined by NICs described by GPU, nodes and NICs
  (``cluster("h100", nodes=2)``, ``cluster("mi300x", 1)``, ``cluster("rtx4090", 1, 8, p2p=False)``; the GPUs and
  their public figures in ``GPUS``), and the :class:`Machine` NCCL's (RCCL's) tuner reads beyond the links.
- ``meshes``: the nodes without a switch that :func:`cluster` lays out link by link: AMD Instinct GPUs joined
  pairwise by Infinity Fabric, GH200 superchips by NVLink, consumer cards on the root ports of their sockets.
- ``codes``: ``nvidia-smi topo -m`` text and its connection codes, and published printouts shipped
  with ringlab (:func:`published`).
- ``nvml``: :func:`discover`, this machine's GPUs read through NVML or ``nvidia-smi``, with the nodes
  and the network from ``network``.
- ``network``: :func:`read_network`, this host's network cards and their speeds (sysfs, as ``ibstat``
  reads them), and :func:`node_facts`, which nodes a job's ranks are on.
- ``spec``: :func:`from_spec`, a machine named in one string (a preset, ``GPU:NODESxGPUS`` as :func:`cluster`
  builds it, ``uniform:GBPS:US`` or ``nodes:RANKS:GBPS:US``, and ``@SCALE``), as ``rl.emulate`` and
  ``ringlab bench --emulate`` take it.
"""
from .codes import parse_topo, published, published_topo, published_topo_names, topology_from_codes
from .graph import GB, Link, SwitchTopology, Topology, from_matrix, joined_nodes, ring, uniform
from .machines import GPUS, Machine, cluster
from .network import node_facts, read_network
from .nvml import discover
from .presets import PUBLISHED_LINKS, pcie_bandwidth, preset, preset_names
from .spec import from_spec

__all__ = ["Topology", "Link", "SwitchTopology", "GB", "uniform", "joined_nodes", "ring", "from_matrix", "preset",
           "preset_names",
           "discover", "published", "published_topo", "published_topo_names", "parse_topo", "topology_from_codes",
           "pcie_bandwidth", "PUBLISHED_LINKS", "read_network", "node_facts", "cluster", "Machine", "GPUS",
           "from_spec"]
