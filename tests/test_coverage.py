"""labs/README.md's table of what the labs teach: every lab it names exists and mentions the row's key
terms, so that the table cannot drift from the labs silently."""
import re

import jupytext

from ringlab.lab import notebooks

README = notebooks.LABS / "README.md"
HOW = {"visual", "measured", "predicted", "counted", "published", "exercise", "quiz", "prose only"}
# The words a lab that teaches each concept uses (every term in one of the row's labs at least, and
# every lab of the row uses one of them at least).
KEY_TERMS = {
    "what this machine has (`doctor`: cores, MPI, GPUs, links)": ["doctor"],
    "GPU topology and `nvidia-smi topo -m` codes (NV#, PIX, PXB, PHB, NODE, SYS)": ["topo -m"],
    "NUMA nodes, and which GPUs to give a job": ["NUMA", "best_gpus"],
    "PCIe throughput: transfer rate x encoding x lanes": ["128b/130b", "lanes"],
    "NVLink, and the DGX-1's hybrid cube-mesh": ["NVLink", "cube-mesh"],
    "NVSwitch (DGX-2, 8-GPU HGX boards)": ["NVSwitch"],
    "host<->device copies against the link's peak": ["host<->device", "host_device_figure"],
    "pinned against pageable host memory": ["pinned", "pageable"],
    "GPUDirect P2P: peer access off against on": ["P2P", "peer access"],
    "CUDA IPC between ranks of one node": ["P2P/IPC"],
    "latency against bandwidth: the alpha-beta model": ["alpha-beta", "message_time"],
    "an MPI message between processes is a memory copy": ["process_vm_readv", "copy_against_mpi"],
    "staging a message through host memory": ["staged_time", "staging"],
    "reduce and broadcast: what they promise": ["reduce.tree", "broadcast"],
    "binomial tree: ceil(log2 n) steps": ["binomial", "log2"],
    "pipelined chain broadcast: K(S+n-2)/(S B)": ["chain_time", "segments"],
    "the best segment count, and latency per step": ["best_segments", "best S"],
    "a fitted alpha is one step of a collective, not a raw message": ["describe_alpha"],
    "naive allreduce: the root carries (n-1)K": ["allreduce.naive", "(n-1)"],
    "ring allreduce: reduce-scatter then allgather": ["reduce-scatter", "allgather"],
    "the ring index rule: at step s rank r sends chunk (r-s) mod n": ["send_chunk", "(j-i) mod n"],
    "the ring is bandwidth-optimal: 2(n-1)/n K per rank": ["bandwidth-optimal", "2(n-1)/n"],
    "which ranks' data a chunk holds (provenance)": ["walkthrough", "whose inputs"],
    "where the ring overtakes naive": ["overtakes", "sweep_lesson"],
    "algbw and bus bandwidth; each collective's bus factor": ["busbw", "bus_factor"],
    "parameter server: a single server's links, sharding": ["allreduce.ps", "server_load"],
    "the server's load, measured": ["measure_server_load"],
    "synchronous against asynchronous servers, and who waits": ["async", "describe_waiting"],
    "stale gradients": ["staleness", "stale gradients"],
    "convergence against wall-clock time": ["wall-clock", "race("],
    "latency-bound and bandwidth-bound sizes (busbw curves)": ["latency-bound", "bandwidth-bound"],
    "the ring's time: 2(n-1)(alpha + K/(nB))": ["ring_time", "2(n-1)(alpha + K/(nB))"],
    "ringlab against MPI and NCCL on GPUs; ranks sharing a GPU (MPS)": ["gpu_bench", "MPS"],
    "published nccl-tests sweeps against the cost model": ["against_published", "nccl-tests"],
    "NVLS: reduction inside the switch": ["NVLS", "nvls_busbw"],
    "machines nobody here has (DGX-1, DGX-2, HGX), and 1024 GPUs": ["dgx2-nvswitch", "1024"],
    "the double binary tree, and tree against ring by size": ["double binary tree", "allreduce.dbtree"],
    "datacenter scale: 8 to 100,000 GPUs, where the ring's latency passes its bandwidth":
        ["at_scale", "ring_turning_point"],
    "several rings at once (NCCL's channels)": ["channels", "rings_on"],
    "hierarchical allreduce across nodes": ["hierarchical", "allreduce.hierarchical"],
    "the order of the ring on uneven links": ["ring_report"],
    "data parallelism: averaging gradients (DistributedOptimizer, parameter server, DDP agree)":
        ["DistributedOptimizer", "DDP"],
    "learning-rate scaling and warm-up": ["warm-up", "scaled_lr"],
    "speed-up against ranks, at equal samples": ["measure_scaling", "speed-up"],
    "gradient bucketing and overlap with backward": ["bucket_bytes", "overlap"],
    "gradient accumulation and large batches": ["accumulat", "large_batch"],
    "when data parallelism pays": ["measure_payoff", "pay"],
    "model parallelism: activations across a pipeline boundary against every gradient":
        ["pipeline_traffic", "activations"],
    "the pipeline bubble of model parallelism: (n-1)/(m+n-1) of a GPipe step": ["bubble", "gpipe_schedule"],
    "a hang: a rank that never calls, or passes another size": ["StepTimeout", "never calls"],
    "PyTorch's watchdog, flight recorder and desync debugging": ["flight recorder", "TORCH_NCCL_DESYNC_DEBUG"],
    "a straggler in a timeline": ["straggler_traces", "timeline"],
    "NCCL's settings (NCCL_DEBUG, NCCL_P2P_DISABLE, ...) and containers": ["NCCL_DEBUG", "--shm-size"],
    "`CUDA_VISIBLE_DEVICES`, local ranks and the link each ring edge uses": ["CUDA_VISIBLE_DEVICES", "rank_links"],
    "sharded data parallelism: ZeRO stages 1-3 and FSDP, what each rank holds and sends":
        ["ZeroOptimizer", "measure_sharding"],
    "activation memory and full recomputation: measured layer by layer against Korthikanti et al.'s count, the extra "
    "forward timed, and the planner's Llama 3 70B": ["measure_recompute", "recompute"],
    "a whole step's peak memory, measured by the operating system, without and with recomputation":
        ["measure_peak", "VmHWM"],
    "tensor parallelism: column- and row-parallel layers, an allreduce of activations in every block":
        ["split_mlp", "column-parallel"],
    "a device mesh: the tensor dimension on a node's fast links, the data dimension across nodes":
        ["device_mesh", "measure_mappings"],
    "expert parallelism: all-to-all dispatch and combine, and what an uneven router costs":
        ["ExpertParallel", "measure_imbalance"],
    "expert capacity and dropless dispatch: tokens dropped at a capacity factor, each pair's own count by all-to-all-v":
        ["measure_dispatch", "alltoallv"],
    "ring attention (sequence parallelism): key/value blocks round a ring, an online softmax":
        ["RingAttention", "online softmax"],
    "sequence parallelism (Megatron's): the norms' regions split by the sequence, a reduce-scatter and an all-gather "
    "for each allreduce, activations t-fold smaller": ["ParallelLayer", "SimulatedRanks", "measure_sequence_parallel"],
    "Ulysses: attention by two all-to-alls, heads split over the ranks, bytes against a ring's":
        ["ulysses_attention", "ulysses_rows"],
    "causal load balance in ring attention (zigzag chunks), and the block that hides a step's transfer":
        ["causal_work", "hiding_block", "check_zigzag_chunks"],
    "pipeline schedules from their dependencies: GPipe, 1F1B, interleaved, zero-bubble ZB-H1":
        ["schedule_rows", "ZB-H1", "check_timeline_bubble"],
    "how NCCL picks its algorithm and protocol (LL, LL128, Simple), and channels": ["predict_nccl", "fastest_protocol"],
    "NVLS for all-gather and reduce-scatter: the switch saves steps, not bytes": ["nvls_rows", "describe_nvls"],
    "PAT: all-gather and reduce-scatter in log2 n steps": ["allgather.pat", "Parallel Aggregated Trees"],
    "symmetric memory: one-shot and two-shot allreduce through a shared window, against the ring and MPI's own":
        ["oneshot", "twoshot", "symmetric memory"],
    "planning a training run: memory per GPU by kind against its capacity, a step's time by kind":
        ["rl.plan", "memory_bars", "step_timeline"],
    "a planner's prediction against a published training run": ["against_published", "closest_run"],
    "the 1F1B pipeline bubble, interleaved: (pp-1)/(vp m)": ["1F1B", "check_interleaved_bubble"],
    "tensor parallelism inside a node against across nodes, at a real model's size": ["tensor_reach"],
    "when ZeRO-3 (FSDP) pays: memory against exposed data-parallel time": ["zero_rows", "ZeRO-3"],
    "context parallelism at 128k tokens: activations and fit": ["context_rows", "128k"],
    "the same run on B200 and GB200 NVL72, and model FLOPs utilisation (MFU)": ["machines(", "MFU", "NVL72"],
}


def _rows() -> list[dict]:
    """The table's rows: concept, the labs' numbers, the ways it is taught, and whether it is planned."""
    rows = []
    for line in README.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") else []
        if len(cells) != 3 or cells[0] == "concept":
            continue
        concept, labs, how = cells
        planned = "(planned)" in how
        ways = [w.strip() for w in re.sub(r"\([^)]*\)", "", how).split(",") if w.strip()]
        rows.append({"concept": concept, "labs": re.findall(r"\[(\d\d)\]\((\d\d_\w+\.ipynb)\)", labs),
                     "how": ways, "planned": planned})
    return rows


def _lab_text(number: str, markdown_only: bool = False) -> str:
    source = next(p for p in notebooks.sources() if p.stem.startswith(number))
    if not markdown_only:
        return source.read_text()
    return "\n".join(c.source for c in jupytext.read(source).cells if c.cell_type == "markdown")


def test_the_table_names_labs_that_exist_and_ways_it_knows():
    rows = _rows()
    assert len(rows) >= 40
    for row in rows:
        assert row["labs"], f"{row['concept']}: no lab named"
        for number, notebook in row["labs"]:
            assert (notebooks.LABS / notebook).exists(), notebook
            assert notebook.startswith(number)
        assert set(row["how"]) <= HOW, f"{row['concept']}: {row['how']}"
        assert row["how"] or row["planned"], row["concept"]
        assert "prose only" not in row["how"] or row["how"] == ["prose only"]


def test_every_row_has_key_terms_and_its_labs_use_them():
    rows = _rows()
    assert sorted(r["concept"] for r in rows) == sorted(KEY_TERMS), "a row and its key terms go together"
    for row in rows:
        terms = KEY_TERMS[row["concept"]]
        if row["planned"]:
            continue  # the section is being written: the lead checks it when it lands
        texts = {number: _lab_text(number).lower() for number, _ in row["labs"]}
        for number, text in texts.items():
            assert any(t.lower() in text for t in terms), f"{row['concept']}: lab {number} mentions none of {terms}"
        for term in terms:
            assert any(term.lower() in text for text in texts.values()), f"{row['concept']}: no lab says {term!r}"


def test_a_prose_only_concept_is_only_in_the_prose():
    for row in _rows():
        if row["how"] != ["prose only"]:
            continue
        terms = [t.lower() for t in KEY_TERMS[row["concept"]]]
        for number, _ in row["labs"]:
            source = next(p for p in notebooks.sources() if p.stem.startswith(number))
            code = [c.source.lower() for c in jupytext.read(source).cells if c.cell_type == "code"]
            assert any(t in _lab_text(number, markdown_only=True).lower() for t in terms), row["concept"]
            assert not any(t in cell for t in terms for cell in code), (
                f"{row['concept']} is marked prose only, but lab {number}'s code uses it")


def test_the_top_level_readme_links_to_the_table():
    assert "labs/README.md" in (notebooks.LABS.parent / "README.md").read_text()
